//! Printing results as a table, JSON or YAML.

use anyhow::Context;
use serde_json::Value;

/// Output format of `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// JSON for programs.
    Json,
    /// YAML.
    Yaml,
}

/// Prints `v`; for tables, `columns` of a single object are printed as `key: value` lines.
pub fn print(fmt: Format, v: &Value, columns: &[&str]) -> anyhow::Result<()> {
    match fmt {
        Format::Json => println!("{}", serde_json::to_string_pretty(v)?),
        Format::Yaml => print!("{}", serde_yaml_ng::to_string(v).context("yaml")?),
        Format::Table => {
            if columns.is_empty() {
                println!("{}", serde_json::to_string_pretty(v)?);
            } else {
                for c in columns {
                    println!("{c}: {}", cell(&v[*c]));
                }
            }
        }
    }
    Ok(())
}

fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Prints rows as aligned columns with an upper-case header.
pub fn table(rows: &[Value], columns: &[&str]) -> anyhow::Result<()> {
    let mut widths: Vec<usize> = columns.iter().map(|c| c.len()).collect();
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| columns.iter().map(|c| cell(&r[*c])).collect())
        .collect();
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let line = |vals: Vec<String>| {
        vals.iter()
            .zip(&widths)
            .map(|(v, w)| format!("{v:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    println!(
        "{}",
        line(columns.iter().map(|c| c.to_uppercase()).collect())
    );
    for row in cells {
        println!("{}", line(row));
    }
    Ok(())
}
