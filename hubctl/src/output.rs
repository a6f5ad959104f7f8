//! Printing results as a table, JSON or YAML. A helper module: it uses none of the command
//! modules.

use anyhow::Context;
use serde_json::Value;

/// Output format of `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// Aligned columns, with every column a list has (`plan list -o wide`: start, end,
    /// reason, failure).
    Wide,
    /// JSON for programs.
    Json,
    /// YAML.
    Yaml,
}

impl Format {
    /// Whether the output is for people: a table, narrow or wide.
    pub fn is_table(self) -> bool {
        match self {
            Format::Table | Format::Wide => true,
            Format::Json | Format::Yaml => false,
        }
    }
}

/// Prints `v`; for tables, `columns` of a single object are printed as `key: value` lines.
pub fn print(fmt: Format, v: &Value, columns: &[&str]) -> anyhow::Result<()> {
    match fmt {
        Format::Json => println!("{}", serde_json::to_string_pretty(v)?),
        Format::Yaml => print!("{}", serde_yaml_ng::to_string(v).context("yaml")?),
        Format::Table | Format::Wide => {
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

/// One table cell or `key: value` value. A cell is one line: its control characters are
/// shown as escapes ([`hub_client::text::escape_controls`]), whatever the node sent (a newline in
/// a name a caller wrote would otherwise print a forged row).
fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => hub_client::text::escape_controls(s).into_owned(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Prints a typed answer as it travels (JSON or YAML), or for tables as indented JSON.
pub fn print_answer<T: serde::Serialize>(fmt: Format, answer: &T) -> anyhow::Result<()> {
    print(fmt, &serde_json::to_value(answer)?, &[])
}

/// An optional value for people: the value, or `-`.
pub(crate) fn or_dash(v: Option<&str>) -> &str {
    v.unwrap_or("-")
}

/// `text` for stdout in red (ANSI) when stdout is a terminal and `NO_COLOR` is not set; as
/// it is otherwise (the text itself must say what is wrong).
pub fn red(text: &str) -> String {
    paint_red(text, std::io::IsTerminal::is_terminal(&std::io::stdout()))
}

/// [`red`] for stderr.
pub fn red_stderr(text: &str) -> String {
    paint_red(text, std::io::IsTerminal::is_terminal(&std::io::stderr()))
}

fn paint_red(text: &str, terminal: bool) -> String {
    if terminal && std::env::var_os("NO_COLOR").is_none() {
        format!("\x1b[1;31m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

/// One warning line per registry of an answer's `insecure_registries` (as the `entity` and
/// `explain` queries give them), in red on a terminal.
pub fn print_insecure_registries(registries: &[hub_client::answer::RegistryRef]) {
    for r in registries {
        println!(
            "{}",
            red(&format!(
                "WARNING: registry {} ({}) is insecure-skip-verify: its TLS certificate is NOT \
                 verified, anyone on the network path can serve its artifacts",
                escaped(&r.name),
                escaped(&r.url)
            ))
        );
    }
}

/// Text from the cluster as one line ([`cell`] of a string).
pub(crate) fn escaped(text: &str) -> String {
    hub_client::text::escape_controls(text).into_owned()
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

/// Prints a list: a table of `columns` (rows mapped by `row`), or the array as JSON/YAML.
pub(crate) fn print_list<T: serde::Serialize>(
    fmt: Format,
    list: &[T],
    columns: &[&str],
    row: impl Fn(&T) -> Value,
) -> anyhow::Result<()> {
    let rows = || list.iter().map(&row).collect::<Vec<Value>>();
    match fmt {
        Format::Table => table(&rows(), columns),
        Format::Wide => {
            // The narrow columns first, then whatever else the rows carry.
            let rows = rows();
            let mut all: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
            for r in &rows {
                for k in r.as_object().into_iter().flat_map(|o| o.keys()) {
                    if !all.contains(k) {
                        all.push(k.clone());
                    }
                }
            }
            let all: Vec<&str> = all.iter().map(String::as_str).collect();
            table(&rows, &all)
        }
        Format::Json | Format::Yaml => print(fmt, &serde_json::to_value(list)?, &[]),
    }
}
