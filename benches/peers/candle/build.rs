//! Reads the candle-core version that Cargo.lock pins and hands it to the program as
//! `CANDLE_VERSION`, for the `candle` field of every JSON line.

use std::{env, fs, path::Path};

fn main() {
    let lock = Path::new(&env::var("CARGO_MANIFEST_DIR").unwrap()).join("Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    let text = fs::read_to_string(&lock).unwrap_or_default();
    let mut version = "unknown".to_string();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"candle-core\"" {
            if let Some(next) = lines.next() {
                if let Some(v) = next.trim().strip_prefix("version = ") {
                    version = v.trim_matches('"').to_string();
                }
            }
            break;
        }
    }
    println!("cargo:rustc-env=CANDLE_VERSION={version}");
}
