//! Reads back the estimates criterion wrote in this run, so a bench can print
//! the ratios between its contenders: every target is a ratio from one run.

use std::path::PathBuf;
use std::time::SystemTime;

/// Criterion's output directory, found as criterion finds it.
fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return home.into();
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    // Benches run with the package root as the working directory.
    PathBuf::from("target/criterion")
}

/// The time per iteration, in nanoseconds, that criterion printed for
/// `group/id`, if it was measured after `since` (so a filtered run never
/// mixes in the numbers of an older one).
pub fn nanos_per_iter(group: &str, id: &str, since: SystemTime) -> Option<f64> {
    let path = criterion_home()
        .join(group)
        .join(id)
        .join("new")
        .join("estimates.json");
    let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
    if modified < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    // Criterion prints the slope when it sampled linearly, the mean when flat.
    ["slope", "mean"]
        .iter()
        .find_map(|field| json[field]["point_estimate"].as_f64())
}
