//! `railyard-fuzz [--seconds N | --cases N] [TARGET...]`: runs fuzz targets one
//! after another (all when none is named) and prints executions and findings.
//! Exits 1 when any target had a finding.

use std::time::Duration;

use railyard_fuzz::TARGETS;
use railyard_fuzz::harness::Budget;

fn main() {
    let mut budget = Budget::Time(Duration::from_secs(60));
    let mut names = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |what: &str| -> f64 {
            match args.next().and_then(|v| v.parse::<f64>().ok()) {
                Some(n) if n > 0.0 => n,
                _ => {
                    eprintln!("railyard-fuzz: {what} needs a positive number");
                    std::process::exit(2);
                }
            }
        };
        match arg.as_str() {
            "--seconds" => budget = Budget::Time(Duration::from_secs_f64(number("--seconds"))),
            "--cases" => budget = Budget::Cases(number("--cases") as u64),
            "-h" | "--help" => {
                let known: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
                println!(
                    "railyard-fuzz [--seconds N | --cases N] [TARGET...]\ntargets: {}",
                    known.join(" ")
                );
                return;
            }
            name => names.push(name.to_string()),
        }
    }
    for name in &names {
        if !TARGETS.iter().any(|(n, _)| n == name) {
            let known: Vec<&str> = TARGETS.iter().map(|(n, _)| *n).collect();
            eprintln!(
                "railyard-fuzz: unknown target {name:?} (known: {})",
                known.join(", ")
            );
            std::process::exit(2);
        }
    }
    let mut found = false;
    for (name, run) in TARGETS {
        if !names.is_empty() && !names.iter().any(|n| n == name) {
            continue;
        }
        let report = run(budget);
        println!("{report}");
        found |= !report.findings.is_empty();
    }
    if found {
        std::process::exit(1);
    }
}
