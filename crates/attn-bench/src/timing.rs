//! How a case is timed: warm-up runs (allocator pools, GPU kernel compilation, idle cores woken)
//! for at least one run and the budget's warm-up time, then runs until the case has both a
//! minimum number of runs and a minimum time; the line reports the median.
//! The device is synchronised before the clock stops, so lazy backends are timed in full.

use std::time::{Duration, Instant};

use anyhow::Result;
use burn::tensor::Device;

use crate::cases::{Case, Pass, Step};
use crate::record::Record;

/// How long each case runs: untimed for one run and `warm_up`, then until it has `min_reps`
/// runs and `target` time, but never past `max_reps` runs or (once it has 3 runs) `max_time`.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Time the untimed runs take at least (one run at least, whatever its length).
    pub warm_up: Duration,
    /// Runs a case always gets (unless `max_time` passes after 3).
    pub min_reps: usize,
    /// Runs a case never exceeds.
    pub max_reps: usize,
    /// Time a case gets once it has `min_reps` runs.
    pub target: Duration,
    /// Time after which a case with 3 runs stops.
    pub max_time: Duration,
}

/// The budget of a full run.
pub const FULL: Budget = Budget {
    warm_up: Duration::from_millis(500),
    min_reps: 5,
    max_reps: 200,
    target: Duration::from_secs(2),
    max_time: Duration::from_secs(20),
};

/// The budget of the short set.
pub const QUICK: Budget = Budget {
    warm_up: Duration::from_millis(50),
    min_reps: 3,
    max_reps: 50,
    target: Duration::from_millis(250),
    max_time: Duration::from_secs(3),
};

/// Times one case on `device` and returns its line; a failure to prepare or run the case
/// becomes the line's `error`.
pub fn time_case(
    case: &Case,
    pass: Pass,
    device: &Device,
    device_name: &str,
    seq_len: usize,
    budget: &Budget,
) -> Record {
    let record = Record::new(case, pass, device_name, seq_len);
    let times = case
        .prepare(pass, device, seq_len)
        .and_then(|mut step| measure(&mut step, budget));
    match times {
        Ok(times) => record.with_times(case, pass, &times),
        Err(e) => Record {
            error: Some(format!("{e:#}")),
            ..record
        },
    }
}

/// Times `step`: untimed runs for the budget's warm-up (one at least), then runs until the
/// budget says stop. Milliseconds.
///
/// The warm-up is timed, not counted, so that a case of a fraction of a millisecond is timed
/// only once the process is in its steady state: on a virtual machine an idle core is woken
/// slowly until the host sees it busy, and the first tenth of a second of a process ran such a
/// case up to twice as slow as the same case later in the process.
///
/// # Errors
/// The first error of a run.
pub fn measure(step: &mut Step, budget: &Budget) -> Result<Vec<f64>> {
    let warm_up = Instant::now();
    step()?;
    while warm_up.elapsed() < budget.warm_up {
        step()?;
    }
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < budget.max_reps {
        let clock = Instant::now();
        step()?;
        times.push(clock.elapsed().as_secs_f64() * 1e3);
        let spent = start.elapsed();
        if (times.len() >= budget.min_reps && spent >= budget.target)
            || (times.len() >= 3 && spent >= budget.max_time)
        {
            break;
        }
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_warms_up_once_then_stops_at_the_budget() {
        let calls = std::rc::Rc::new(std::cell::Cell::new(0));
        let counter = calls.clone();
        let mut step: Step = Box::new(move || {
            counter.set(counter.get() + 1);
            Ok(())
        });
        // A zero target: the minimum number of runs ends it.
        let budget = Budget {
            warm_up: Duration::ZERO,
            min_reps: 5,
            max_reps: 7,
            target: Duration::ZERO,
            max_time: Duration::from_secs(60),
        };
        let times = measure(&mut step, &budget).expect("the step never fails");
        assert_eq!(times.len(), 5);
        assert_eq!(calls.get(), 6, "one warm-up run is not timed");
        // An unreachable target: the maximum number of runs ends it.
        let budget = Budget {
            target: Duration::from_secs(3600),
            ..budget
        };
        assert_eq!(measure(&mut step, &budget).expect("never fails").len(), 7);
    }

    #[test]
    fn the_timed_runs_start_once_the_warm_up_time_has_passed() {
        let starts = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let log = starts.clone();
        let mut step: Step = Box::new(move || {
            log.borrow_mut().push(Instant::now());
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        });
        let budget = Budget {
            warm_up: Duration::from_millis(20),
            min_reps: 3,
            max_reps: 3,
            target: Duration::ZERO,
            max_time: Duration::from_secs(60),
        };
        let before = Instant::now();
        let times = measure(&mut step, &budget).expect("the step never fails");
        assert_eq!(times.len(), 3);
        let starts = starts.borrow();
        let warm_up_runs = starts.len() - times.len();
        assert!(warm_up_runs >= 1, "no untimed run");
        let waited = starts[warm_up_runs].duration_since(before);
        assert!(
            waited >= budget.warm_up,
            "the first timed run started {waited:?} after the call, inside the 20 ms warm-up"
        );
    }

    #[test]
    fn measure_passes_on_the_first_error() {
        let mut step: Step = Box::new(|| Err(anyhow::anyhow!("out of memory")));
        let error = measure(&mut step, &QUICK).expect_err("the step fails");
        assert_eq!(error.to_string(), "out of memory");
    }
}
