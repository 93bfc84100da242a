//! Effective hints are pushed to sidecars: after an operator overrides a
//! hint from the CLI, the sidecar of that server learns it over its report
//! stream and records it with each result (its `tool.result` audit record).

use crate::common::*;
use std::time::Duration;

fn echo_results_with(log: &str, idempotent: bool) -> bool {
    log.lines().any(|l| {
        l.contains("tool.result")
            && l.contains(r#""tool":"echo""#)
            && l.contains(&format!(r#""idempotentHint":{idempotent}"#))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn hint_overrides_reach_the_sidecar() {
    let _heavy = HEAVY.lock().await;
    let gw = Gateway::start(StoreKind::Embedded, 10).await;
    let mut engine = gw.engine().await;

    // The reference server declares echo idempotent; override it to false.
    ok_stdout(
        &gw.cli(&["hints", "set", "orders", "echo", "--idempotent", "false"])
            .await,
        "hints set",
    );
    eventually(
        "the sidecar records the overridden hint",
        Duration::from_secs(15),
        || {
            let mut engine = engine.clone();
            let log_of = || gw.log();
            async move {
                engine
                    .call_tool(call_request("orders__echo", r#"{"message":"x"}"#, ""))
                    .await
                    .map_err(|e| e.to_string())?;
                if echo_results_with(&log_of(), false) {
                    Ok(())
                } else {
                    Err("no tool.result record with idempotentHint false yet".to_owned())
                }
            }
        },
    )
    .await;

    // Cleared: the declared hint comes back (only records written from
    // now on count).
    let seen = gw.log().len();
    ok_stdout(
        &gw.cli(&["hints", "clear", "orders", "echo"]).await,
        "hints clear",
    );
    eventually(
        "the sidecar records the declared hint again",
        Duration::from_secs(15),
        || {
            let mut engine = engine.clone();
            let log_of = || gw.log().get(seen..).unwrap_or_default().to_owned();
            async move {
                engine
                    .call_tool(call_request("orders__echo", r#"{"message":"y"}"#, ""))
                    .await
                    .map_err(|e| e.to_string())?;
                if echo_results_with(&log_of(), true) {
                    Ok(())
                } else {
                    Err("no tool.result record with idempotentHint true yet".to_owned())
                }
            }
        },
    )
    .await;
    engine
        .call_tool(call_request("orders__echo", r#"{"message":"z"}"#, ""))
        .await
        .expect("calls keep working");
    gw.stop().await;
}
