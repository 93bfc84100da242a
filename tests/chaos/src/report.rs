//! The report: one markdown table row per fault (repetitions summed), then
//! every problem (anything lost or duplicated) and note, with the round it
//! happened in.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::round::RoundReport;

fn secs(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64())
}

fn range(values: &[Duration]) -> String {
    match (values.iter().min(), values.iter().max()) {
        (Some(lo), Some(hi)) if lo == hi => secs(*lo),
        (Some(lo), Some(hi)) => format!("{}–{}", secs(*lo), secs(*hi)),
        _ => "–".into(),
    }
}

fn counts(map: &BTreeMap<String, usize>) -> String {
    if map.is_empty() {
        return "0".into();
    }
    map.iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The markdown report of `rounds`.
pub fn markdown(rounds: &[RoundReport]) -> String {
    let mut order: Vec<&str> = Vec::new();
    for r in rounds {
        if !order.contains(&r.fault.as_str()) {
            order.push(&r.fault);
        }
    }
    let mut out = String::new();
    out.push_str(
        "| fault | reps | calls | ok | errors (RPC code) | background results | task results lost (ran, reported failed) | cards answered / closed / orphaned | recovery s (any / each replica) | heal s | stream breaks | lost or duplicated |\n\
         |---|---:|---:|---:|---|---|---:|---|---:|---:|---:|---|\n",
    );
    for fault in order {
        let mine: Vec<&RoundReport> = rounds.iter().filter(|r| r.fault == fault).collect();
        let mut errors = BTreeMap::new();
        let mut background = BTreeMap::new();
        let (mut calls, mut ok, mut answered, mut closed, mut orphaned, mut breaks, mut problems) =
            (0, 0, 0, 0, 0, 0, 0);
        let mut results_lost = 0;
        for r in &mine {
            calls += r.calls;
            ok += r.ok;
            answered += r.cards_answered;
            closed += r.cards_closed.len();
            orphaned += r.orphaned_cards.len();
            results_lost += r.results_lost.len();
            breaks += r.stream_breaks;
            problems += r.problems.len();
            for (k, v) in &r.errors {
                *errors.entry(k.clone()).or_default() += v;
            }
            if r.tool_errors > 0 {
                *errors.entry("isError".to_owned()).or_default() += r.tool_errors;
            }
            for (k, v) in &r.background {
                *background.entry(k.clone()).or_default() += v;
            }
        }
        let recovery: Vec<Duration> = mine.iter().filter_map(|r| r.recovery).collect();
        let recovery_all: Vec<Duration> = mine.iter().filter_map(|r| r.recovery_all).collect();
        let heal: Vec<Duration> = mine.iter().map(|r| r.heal).collect();
        let _ = writeln!(
            out,
            "| {fault} | {} | {calls} | {ok} | {} | {} | {results_lost} | {answered} / {closed} / {orphaned} | {} / {} | {} | {breaks} | {} |",
            mine.len(),
            counts(&errors),
            counts(&background),
            range(&recovery),
            range(&recovery_all),
            range(&heal),
            if problems == 0 {
                "nothing".to_owned()
            } else {
                format!("**{problems}** (below)")
            },
        );
    }
    let problems: Vec<String> = rounds
        .iter()
        .flat_map(|r| {
            r.problems
                .iter()
                .map(move |p| format!("- {} #{} ({}): {p}", r.fault, r.rep, r.target))
        })
        .collect();
    if !problems.is_empty() {
        out.push_str("\nLost or duplicated:\n\n");
        out.push_str(&problems.join("\n"));
        out.push('\n');
    }
    let notes: Vec<String> = rounds
        .iter()
        .flat_map(|r| {
            let closed = r
                .cards_closed
                .iter()
                .map(move |c| format!("- {} #{}: a card was closed: {c}", r.fault, r.rep));
            let repeats = (r.read_only_repeats > 0).then(|| {
                format!(
                    "- {} #{}: {} read-only call(s) ran again upstream (allowed)",
                    r.fault, r.rep, r.read_only_repeats
                )
            });
            let orphaned = r
                .orphaned_cards
                .iter()
                .map(move |c| format!("- {} #{}: ORPHANED: {c}", r.fault, r.rep))
                .chain(
                    r.results_lost
                        .iter()
                        .map(move |l| format!("- {} #{}: RESULT LOST: {l}", r.fault, r.rep)),
                );
            closed.chain(orphaned).chain(repeats).chain(
                r.notes
                    .iter()
                    .map(move |n| format!("- {} #{}: {n}", r.fault, r.rep)),
            )
        })
        .collect();
    if !notes.is_empty() {
        out.push_str("\nNotes:\n\n");
        out.push_str(&notes.join("\n"));
        out.push('\n');
    }
    out
}
