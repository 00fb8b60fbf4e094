//! docs/using.md's table "Why an instance is refused" against the reasons the
//! operator can report: every `Blocked` variant (`Blocked::ALL`) and the fixed
//! reason of every other `Error` variant (`Error::reason`) has a row, and every
//! row names a reason the operator can report. Its table "Why an instance
//! stays Deploying" likewise against the rollout diagnoses (`Reason::ALL` of
//! `reconcile::diagnose`).
//!
//! A row reads `` | `Reason` ... | meaning | who fixes it | command | `` (the
//! rollout table: `` | `Reason` ... | meaning | what to do | ``): the
//! reason is the first code span of the first cell. Cells are split on `|`
//! not escaped as `\|` (GitHub's rule; a code span does not protect a `|`).

use std::collections::BTreeMap;

use tinycode_operator::helm::HelmError;
use tinycode_operator::reconcile::diagnose::Reason;
use tinycode_operator::reconcile::error::Error;
use tinycode_operator::reconcile::reason::Blocked;
use tinycode_operator::reconcile::rules::InvalidSpec;

/// A table of reasons: its section's heading and its header row.
struct Table {
    heading: &'static str,
    header_row: &'static str,
}

const REFUSED: Table = Table {
    heading: "## Why an instance is refused",
    header_row: "| reason | what it means | who fixes it | command |",
};
const ROLLOUT: Table =
    Table { heading: "## Why an instance stays Deploying", header_row: "| reason | what it means | what to do |" };

/// Which variant of `Error` this is. The match does not compile when `Error`
/// gains a variant, so a new kind of failure cannot skip the table.
fn variant(e: &Error) -> usize {
    match e {
        Error::InvalidSpec(_) => 0,
        Error::Blocked { .. } => 1,
        Error::Kube { .. } => 2,
        Error::Helm(_) => 3,
        Error::Stalled(_) => 4,
    }
}

/// One error of each variant of `Error`.
fn one_of_each_error() -> Vec<Error> {
    let api_refusal = kube::core::Status::failure("forbidden", "Forbidden").with_code(403);
    let errors = vec![
        Error::InvalidSpec(InvalidSpec(Vec::new())),
        Error::blocked(Blocked::NamespaceNotPrepared, "x"),
        Error::Kube { during: "x", source: kube::Error::Api(Box::new(api_refusal)) },
        Error::Helm(HelmError::Failed { action: "upgrade", stderr: "x".into() }),
        Error::Stalled("x".into()),
    ];
    let variants: std::collections::BTreeSet<usize> = errors.iter().map(variant).collect();
    assert_eq!(variants, (0..5).collect(), "one error of each variant");
    errors
}

/// Every reason the operator can put on an instance.
fn reportable() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Blocked::ALL.iter().map(|b| b.as_str()).collect();
    for e in one_of_each_error() {
        if !out.contains(&e.reason()) {
            out.push(e.reason());
        }
    }
    out
}

/// The cells of a Markdown table row.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let (mut out, mut cell, mut escaped) = (Vec::new(), String::new(), false);
    for c in inner.chars() {
        match c {
            '|' if !escaped => out.push(std::mem::take(&mut cell).trim().to_string()),
            _ => cell.push(c),
        }
        escaped = c == '\\';
    }
    out.push(cell.trim().to_string());
    out
}

/// The table's rows by reason, with their line numbers.
fn rows(doc: &str, table: &Table) -> Result<BTreeMap<String, usize>, String> {
    let Table { heading, header_row } = table;
    let start = doc.find(&format!("\n{heading}\n")).ok_or(format!("docs/using.md has no '{heading}' section"))?;
    let section = &doc[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |i| i + 1)];
    let first_line = doc[..start + 1].lines().count();
    let width = cells(header_row).len();
    let (mut out, mut in_table) = (BTreeMap::new(), false);
    for (i, line) in section.lines().enumerate() {
        let line_no = first_line + i + 1;
        if line.starts_with(header_row) {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells = cells(line);
        if cells.len() != width {
            return Err(format!("docs/using.md line {line_no}: not {width} cells: {line}"));
        }
        if cells.iter().any(|c| c.is_empty()) {
            return Err(format!("docs/using.md line {line_no}: an empty cell: {line}"));
        }
        let Some(name) = cells[0].split('`').nth(1).filter(|n| !n.is_empty()) else {
            return Err(format!("docs/using.md line {line_no}: the first cell names no `Reason`: {}", cells[0]));
        };
        if let Some(earlier) = out.insert(name.to_string(), line_no) {
            return Err(format!("docs/using.md lines {earlier} and {line_no} both describe {name}"));
        }
    }
    if out.is_empty() {
        return Err(format!("docs/using.md: no table starting '{header_row}' under '{heading}'"));
    }
    Ok(out)
}

/// Every disagreement between a table and the reasons it documents.
fn disagreements(doc: &str, table: &Table, reasons: &[&str]) -> Vec<String> {
    let rows = match rows(doc, table) {
        Ok(rows) => rows,
        Err(e) => return vec![e],
    };
    let mut out: Vec<String> = reasons
        .iter()
        .filter(|r| !rows.contains_key(**r))
        .map(|r| format!("{r} has no row in docs/using.md's table '{}'", table.heading))
        .collect();
    for (name, line) in &rows {
        if !reasons.contains(&name.as_str()) {
            out.push(format!("docs/using.md line {line}: {name} is no reason the operator reports"));
        }
    }
    out
}

/// Every reason a rollout's diagnosis can put on an instance.
fn rollout_reasons() -> Vec<&'static str> {
    Reason::ALL.iter().map(|r| r.as_str()).collect()
}

fn using_md() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/using.md")).expect("docs/using.md")
}

#[test]
fn every_reason_the_operator_reports_has_a_row() {
    let problems = disagreements(&using_md(), &REFUSED, &reportable());
    assert!(problems.is_empty(), "docs/using.md and the operator's reasons disagree:\n{}", problems.join("\n"));
}

#[test]
fn every_reason_a_rollout_diagnosis_reports_has_a_row() {
    let problems = disagreements(&using_md(), &ROLLOUT, &rollout_reasons());
    assert!(problems.is_empty(), "docs/using.md and the rollout's reasons disagree:\n{}", problems.join("\n"));
}

#[test]
fn the_reasons_were_all_enumerated() {
    let reasons = reportable();
    for fixed in ["InvalidSpec", "KubernetesApiError", "HelmFailed", "RetriesExhausted", "FinalizerError"] {
        assert!(reasons.contains(&fixed), "{fixed} missing from {reasons:?}");
    }
    assert_eq!(reasons.len(), Blocked::ALL.len() + 4, "{reasons:?}");
}

/// The check itself, on edited copies: a missing row, an unknown one and a
/// duplicate are each reported.
#[test]
fn each_kind_of_mistake_is_reported() {
    let doc = using_md();
    let row = |reason: &str| {
        doc.lines()
            .find(|l| l.starts_with(&format!("| `{reason}` ")))
            .unwrap_or_else(|| panic!("no row for {reason}"))
            .to_string()
    };
    let cases = [
        (&REFUSED, doc.replace(&format!("{}\n", row("SccMissing")), ""), "SccMissing has no row".to_string()),
        (&REFUSED, doc.replace(&format!("{}\n", row("HelmFailed")), ""), "HelmFailed has no row".to_string()),
        (
            &REFUSED,
            doc.replace(&row("SccMissing"), &format!("{}\n| `NoSuchReason` | a | b | c |", row("SccMissing"))),
            "NoSuchReason is no reason the operator reports".to_string(),
        ),
        (
            &REFUSED,
            doc.replace(&row("SccMissing"), &format!("{0}\n{0}", row("SccMissing"))),
            "both describe SccMissing".to_string(),
        ),
        (&ROLLOUT, doc.replace(&format!("{}\n", row("CrashLoop")), ""), "CrashLoop has no row".to_string()),
        (
            &ROLLOUT,
            doc.replace(&row("CrashLoop"), &format!("{}\n| `NoSuchReason` | a | b | c |", row("CrashLoop"))),
            "not 3 cells".to_string(),
        ),
    ];
    for (table, edited, expected) in cases {
        let reasons = if table.heading == REFUSED.heading { reportable() } else { rollout_reasons() };
        let problems = disagreements(&edited, table, &reasons);
        assert!(problems.iter().any(|p| p.contains(&expected)), "expected {expected:?} among {problems:?}");
    }
}
