//! Circles in a module graph: its strongly connected components of two or more modules
//! (Tarjan's algorithm), each with one cycle through it, shortest from its first file, and the
//! lines that make each import.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::graph::{Edge, ModuleGraph};

/// Modules that import each other, directly or around a longer cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Circle {
    /// The `src` folder the files are relative to.
    pub src: PathBuf,
    /// The module files of the component, sorted.
    pub modules: Vec<PathBuf>,
    /// One cycle, from the first of `modules` back to it, as its imports in order.
    pub cycle: Vec<Edge>,
    /// Every import between two of `modules`: one of them must go for the circle to break.
    pub edges: Vec<Edge>,
}

impl fmt::Display for Circle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self
            .modules
            .iter()
            .map(|m| m.display().to_string())
            .collect();
        writeln!(
            f,
            "circle of {} modules in {}: {}",
            self.modules.len(),
            self.src.display(),
            names.join(", ")
        )?;
        writeln!(f, "  a cycle through it:")?;
        for edge in &self.cycle {
            writeln!(f, "    {edge}")?;
        }
        writeln!(f, "  every import inside it:")?;
        for edge in &self.edges {
            writeln!(f, "    {edge}")?;
        }
        Ok(())
    }
}

impl Circle {
    /// The circles of `graph`: each strongly connected component of two or more modules, in
    /// the order of their first file.
    pub fn find(graph: &ModuleGraph) -> Vec<Circle> {
        let index: BTreeMap<&Path, usize> = graph
            .modules
            .iter()
            .enumerate()
            .map(|(k, m)| (m.as_path(), k))
            .collect();
        let mut next = vec![Vec::new(); graph.modules.len()];
        for (k, edge) in graph.edges.iter().enumerate() {
            if let (Some(&from), Some(&to)) =
                (index.get(edge.from.as_path()), index.get(edge.to.as_path()))
            {
                next[from].push((to, k));
            }
        }
        let mut found: Vec<Circle> = components(&next)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|mut component| {
                component.sort_by(|&a, &b| graph.modules[a].cmp(&graph.modules[b]));
                circle(graph, &next, &component)
            })
            .collect();
        found.sort_by(|a, b| a.modules.cmp(&b.modules));
        found
    }
}

/// One component as a [`Circle`]: its sorted files, a shortest cycle from the first, and its
/// inner edges.
fn circle(graph: &ModuleGraph, next: &[Vec<(usize, usize)>], component: &[usize]) -> Circle {
    let inside = |m: usize| component.contains(&m);
    let start = component[0];
    // Breadth-first from `start` over the component's edges, until an edge returns to it;
    // `came_by[m]` is the node and edge by which `m` was first reached.
    let mut came_by: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    let mut closing = None;
    'search: while let Some(m) = queue.pop_front() {
        for &(to, edge) in &next[m] {
            if to == start {
                closing = Some((m, edge));
                break 'search;
            }
            if inside(to) && !came_by.contains_key(&to) {
                came_by.insert(to, (m, edge));
                queue.push_back(to);
            }
        }
    }
    let mut cycle = Vec::new();
    let mut step = closing;
    while let Some((from, edge)) = step {
        cycle.push(graph.edges[edge].clone());
        step = if from == start {
            None
        } else {
            came_by.get(&from).copied()
        };
    }
    cycle.reverse();
    let edges = graph
        .edges
        .iter()
        .filter(|e| {
            let member = |p: &PathBuf| component.iter().any(|&m| &graph.modules[m] == p);
            member(&e.from) && member(&e.to)
        })
        .cloned()
        .collect();
    Circle {
        src: graph.src.clone(),
        modules: component
            .iter()
            .map(|&m| graph.modules[m].clone())
            .collect(),
        cycle,
        edges,
    }
}

/// The strongly connected components of the graph whose edges from node `m` are `next[m]`
/// (each `(to, edge index)`), by Tarjan's algorithm.
fn components(next: &[Vec<(usize, usize)>]) -> Vec<Vec<usize>> {
    struct Tarjan<'a> {
        next: &'a [Vec<(usize, usize)>],
        order: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        found: Vec<Vec<usize>>,
    }

    impl Tarjan<'_> {
        fn visit(&mut self, m: usize) {
            self.order[m] = Some(self.counter);
            self.low[m] = self.counter;
            self.counter += 1;
            self.stack.push(m);
            self.on_stack[m] = true;
            for &(to, _) in &self.next[m] {
                match self.order[to] {
                    None => {
                        self.visit(to);
                        self.low[m] = self.low[m].min(self.low[to]);
                    }
                    Some(order) if self.on_stack[to] => self.low[m] = self.low[m].min(order),
                    Some(_) => {}
                }
            }
            if Some(self.low[m]) == self.order[m] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack[top] = false;
                    component.push(top);
                    if top == m {
                        break;
                    }
                }
                self.found.push(component);
            }
        }
    }

    let n = next.len();
    let mut tarjan = Tarjan {
        next,
        order: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        counter: 0,
        found: Vec::new(),
    };
    for m in 0..n {
        if tarjan.order[m].is_none() {
            tarjan.visit(m);
        }
    }
    tarjan.found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut components: Vec<Vec<usize>>) -> Vec<Vec<usize>> {
        for c in &mut components {
            c.sort_unstable();
        }
        components.sort();
        components
    }

    #[test]
    fn tarjan_finds_each_component_once() {
        // 0 -> 1 -> 2 -> 0, 2 -> 3, 3 -> 4 -> 3, 5 alone.
        let edges = [(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 3)];
        let mut next = vec![Vec::new(); 6];
        for (k, &(from, to)) in edges.iter().enumerate() {
            next[from].push((to, k));
        }
        assert_eq!(
            sorted(components(&next)),
            [vec![0, 1, 2], vec![3, 4], vec![5]]
        );
    }

    #[test]
    fn the_cycle_is_shortest_from_the_first_file() {
        let edge = |from: &str, to: &str, line| Edge {
            from: from.into(),
            to: to.into(),
            lines: vec![line],
        };
        // a -> b -> c -> a and the shortcut b -> a.
        let graph = ModuleGraph {
            src: "src".into(),
            modules: ["lib.rs", "a.rs", "b.rs", "c.rs"]
                .map(PathBuf::from)
                .to_vec(),
            edges: vec![
                edge("a.rs", "b.rs", 1),
                edge("b.rs", "a.rs", 2),
                edge("b.rs", "c.rs", 3),
                edge("c.rs", "a.rs", 4),
            ],
            reexports: vec![edge("lib.rs", "a.rs", 5)],
        };
        let found = Circle::find(&graph);
        assert_eq!(found.len(), 1);
        assert_eq!(
            found[0].modules,
            ["a.rs", "b.rs", "c.rs"].map(PathBuf::from)
        );
        assert_eq!(
            found[0].cycle,
            [edge("a.rs", "b.rs", 1), edge("b.rs", "a.rs", 2)]
        );
        assert_eq!(found[0].edges.len(), 4);
        let shown = found[0].to_string();
        assert!(shown.contains("a.rs -> b.rs (a.rs:1)"), "{shown}");
    }
}
