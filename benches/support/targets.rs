//! The performance targets of docs/performance.md, checked against one
//! run's figures. Each check prints one line that starts with `target:`, so
//! that `benches/run.sh` can gather every verdict of a run in one place
//! (`target/perf/targets.txt`).

/// Which side of its bound a target's figure must be on.
#[derive(Clone, Copy)]
pub enum Bound {
    /// The figure must not exceed the bound (a cost ratio).
    AtMost(f64),
    /// The figure must reach the bound (a speed-up or a share of a rate).
    AtLeast(f64),
}

impl Bound {
    /// Whether `figure` meets this bound.
    pub fn holds(self, figure: f64) -> bool {
        match self {
            Bound::AtMost(bound) => figure <= bound,
            Bound::AtLeast(bound) => figure >= bound,
        }
    }
}

/// How a figure is written: a ratio (`1.31x`), a share of a rate
/// (`63.3%`, from a fraction), or a plain number (`0.240`).
#[derive(Clone, Copy)]
pub enum Unit {
    Ratio,
    Percent,
    Plain,
}

impl Unit {
    /// `value` written with `extra` more decimals than usual.
    fn show(self, value: f64, extra: usize) -> String {
        match self {
            Unit::Ratio => format!("{value:.*}x", 2 + extra),
            Unit::Percent => format!("{:.*}%", 1 + extra, value * 100.0),
            Unit::Plain => format!("{value:.*}", 3 + extra),
        }
    }
}

/// The line for one target: what was measured, the figure, the bound, and
/// whether it was met.
pub fn verdict(what: &str, figure: f64, bound: Bound, unit: Unit) -> String {
    let (sign, limit) = match bound {
        Bound::AtMost(limit) => ("<=", limit),
        Bound::AtLeast(limit) => (">=", limit),
    };
    // A figure that rounds to its bound is written with more decimals, so
    // that a miss never reads as equal to the bound.
    let extra = if unit.show(figure, 0) == unit.show(limit, 0) {
        2
    } else {
        0
    };
    format!(
        "target: {what}: {} ({sign} {}): {}",
        unit.show(figure, extra),
        unit.show(limit, extra),
        if bound.holds(figure) { "met" } else { "MISSED" }
    )
}

/// Prints [`verdict`].
pub fn check(what: &str, figure: f64, bound: Bound, unit: Unit) {
    println!("{}", verdict(what, figure, bound, unit));
}
