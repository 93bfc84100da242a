//! One round: the load starts, a fault is injected into a real process
//! while calls are in flight and background tasks run, the cluster heals
//! (what was killed is started again), the load stops, and the round's
//! criteria are checked:
//!
//! - every call got exactly one outcome (a result or a clear error) within
//!   [`load::CALL_LIMIT`];
//! - every background call reached exactly one terminal state, seen on
//!   every subscription, never twice on one stream, the same everywhere,
//!   and a fresh subscription replays it exactly once;
//! - every approval card opened before the fault is found afterwards and
//!   either answered (its call then runs once) or closed with an outcome;
//! - no call that is not read-only ran twice upstream (execution log).
//!
//! A fault that hits one server (a sidecar, an upstream server) waits
//! until calls to that server are in flight and one of its background
//! calls was created, times the recovery on that server's probe calls, and
//! the round goes on only once calls to each server succeed again through
//! each replica.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail};
use nix::sys::signal::Signal;
use switchyard_proto::v1 as pb;
use tokio_util::sync::CancellationToken;

use crate::cluster::{
    Cluster, HTTP_SERVER, LEASE_TTL_SECS, LIMIT, SERVER, SERVERS, SWEEP_EVERY, signal,
};
use crate::load::{self, CallRecord, Kind, Outcome, Seen};

/// The faults, in the order a run injects them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// kill -9 of the etcd leader.
    EtcdLeaderKill,
    /// kill -9 of a control-plane replica.
    ReplicaKill,
    /// kill -9 of a sidecar.
    SidecarKill,
    /// kill -9 of the upstream server process under a sidecar.
    UpstreamKill,
    /// kill -9 of the Streamable HTTP server both `orders-http` sidecars
    /// talk to; the driver starts it again on the same port.
    HttpUpstreamKill,
    /// SIGSTOP of a replica for longer than the lease TTL, then SIGCONT.
    ReplicaStop,
    /// Replica `b` cut off from every etcd member, then brought back.
    EtcdCut,
}

impl Fault {
    /// Every fault.
    pub const ALL: [Fault; 7] = [
        Fault::EtcdLeaderKill,
        Fault::ReplicaKill,
        Fault::SidecarKill,
        Fault::UpstreamKill,
        Fault::HttpUpstreamKill,
        Fault::ReplicaStop,
        Fault::EtcdCut,
    ];

    /// Its name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Fault::EtcdLeaderKill => "etcd-leader-kill",
            Fault::ReplicaKill => "replica-kill",
            Fault::SidecarKill => "sidecar-kill",
            Fault::UpstreamKill => "upstream-kill",
            Fault::HttpUpstreamKill => "http-upstream-kill",
            Fault::ReplicaStop => "replica-sigstop",
            Fault::EtcdCut => "etcd-cut",
        }
    }

    /// The server the fault hits in repetition `rep`, if it hits one:
    /// `sidecar-kill` alternates between the servers (`orders-http` in odd
    /// repetitions, so in `--fast`), `upstream-kill` is `orders`' stdio
    /// server, `http-upstream-kill` `orders-http`'s HTTP server.
    pub fn server(self, rep: u32) -> Option<&'static str> {
        match self {
            Fault::SidecarKill => Some(SERVERS[(rep as usize) % SERVERS.len()]),
            Fault::UpstreamKill => Some(SERVER),
            Fault::HttpUpstreamKill => Some(HTTP_SERVER),
            _ => None,
        }
    }

    /// The side (replica, or the sidecar registered with it) the fault
    /// hits in repetition `rep`: alternating; for `sidecar-kill`, every
    /// second repetition, so that each server's sidecars are both killed
    /// within four repetitions.
    pub fn side(self, rep: u32) -> usize {
        match self {
            Fault::SidecarKill => (rep as usize / 2) % 2,
            _ => (rep as usize) % 2,
        }
    }
}

/// What a round measured.
#[derive(Debug, Default)]
pub struct RoundReport {
    pub fault: String,
    pub rep: u32,
    /// What was hit ("etcd1", "replica-a", ...).
    pub target: String,
    pub calls: usize,
    pub ok: usize,
    pub tool_errors: usize,
    pub backgrounded: usize,
    /// RPC errors by code.
    pub errors: BTreeMap<String, usize>,
    /// Background calls by terminal status.
    pub background: BTreeMap<String, usize>,
    /// Cards: answered after the fault / closed with an outcome.
    pub cards_answered: usize,
    pub cards_closed: Vec<String>,
    /// Cards still open (and answerable) after their call had ended.
    pub orphaned_cards: Vec<String>,
    /// Tasks that ran on in a live server process while their call was
    /// failed as "task not found".
    pub results_lost: Vec<String>,
    /// Executions of read-only calls beyond the first (allowed).
    pub read_only_repeats: usize,
    /// Fault → the first successful probe call that started after it,
    /// through either replica.
    pub recovery: Option<Duration>,
    /// Fault → a successful probe call through each replica.
    pub recovery_all: Option<Duration>,
    /// Fault → the cluster healed (everything serving again).
    pub heal: Duration,
    pub stream_breaks: u32,
    /// Anything lost or duplicated: each a sentence. Empty = pass.
    pub problems: Vec<String>,
    /// Notes (not failures).
    pub notes: Vec<String>,
    pub wall: Duration,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The sessions the load uses, created once.
#[derive(Debug, Clone)]
pub struct Sessions {
    /// `auto` mode: calls run without asking.
    pub auto: String,
    /// `ask` mode: `create_order` waits for an approval.
    pub ask: String,
}

/// Creates the two sessions through replica `a`.
pub async fn create_sessions(cluster: &Cluster) -> anyhow::Result<Sessions> {
    let mut engine = load::engine(&cluster.replicas[0].endpoint());
    let mut create = async |mode: pb::PermissionMode| -> anyhow::Result<String> {
        Ok(engine
            .create_session(pb::CreateSessionRequest {
                enabled_servers: SERVERS.iter().map(|s| (*s).to_owned()).collect(),
                permission_mode: mode as i32,
                roots: vec![],
            })
            .await
            .map_err(|e| anyhow!("CreateSession: {e}"))?
            .into_inner()
            .id)
    };
    let auto = create(pb::PermissionMode::Auto).await?;
    let ask = create(pb::PermissionMode::Ask).await?;
    Ok(Sessions { auto, ask })
}

/// Waits until `check` gives `Ok`, polling every 100 ms, for up to `limit`.
async fn until<F, Fut>(what: &str, limit: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        let last = match check().await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if Instant::now() > deadline {
            bail!("{what}: not within {limit:?}: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The cards of the `ask` session whose run id is one of `keys`, through
/// the first replica that answers.
async fn cards(
    endpoints: &[String],
    session: &str,
    keys: &[String],
) -> Result<BTreeMap<String, pb::Interaction>, String> {
    let mut last = String::new();
    for endpoint in endpoints {
        let mut engine = load::engine(endpoint);
        let listed = tokio::time::timeout(
            Duration::from_secs(3),
            engine.list_interactions(pb::ListInteractionsRequest {
                session_id: session.to_owned(),
                include_resolved: true,
            }),
        )
        .await;
        match listed {
            Ok(Ok(r)) => {
                return Ok(r
                    .into_inner()
                    .interactions
                    .into_iter()
                    .filter(|i| keys.contains(&i.run_id))
                    .map(|i| (i.run_id.clone(), i))
                    .collect());
            }
            Ok(Err(e)) => last = format!("{endpoint}: {}: {}", e.code(), e.message()),
            Err(_) => last = format!("{endpoint}: no answer within 3 s"),
        }
    }
    Err(last)
}

/// Runs one round of `fault` (repetition `rep`) on `cluster`.
pub async fn run(
    cluster: &mut Cluster,
    sessions: &Sessions,
    fault: Fault,
    rep: u32,
) -> anyhow::Result<RoundReport> {
    let round_start = Instant::now();
    let since_ms = now_ms() - 1;
    let round = format!("{}-{rep}", fault.name());
    let endpoints: Arc<Vec<String>> =
        Arc::new(cluster.replicas.iter().map(|r| r.endpoint()).collect());
    let seen = Arc::new(Seen::default());
    let stop_load = CancellationToken::new();
    let stop_events = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();

    // ---- the load: event subscriptions first, then calls.
    for (via, endpoint) in endpoints.iter().enumerate() {
        tasks.spawn(load::subscriber(
            seen.clone(),
            endpoint.clone(),
            via,
            sessions.auto.clone(),
            since_ms,
            stop_events.clone(),
        ));
    }
    let mut workers = tokio::task::JoinSet::new();
    for w in 0..4 {
        workers.spawn(load::foreground_worker(
            seen.clone(),
            endpoints.clone(),
            round.clone(),
            sessions.auto.clone(),
            w,
            w % 2,
            stop_load.clone(),
        ));
    }
    for via in 0..endpoints.len() {
        workers.spawn(load::probe(
            seen.clone(),
            endpoints.clone(),
            round.clone(),
            sessions.auto.clone(),
            via,
            stop_load.clone(),
        ));
    }
    for via in 0..endpoints.len() {
        workers.spawn(load::stream_worker(
            seen.clone(),
            endpoints.clone(),
            round.clone(),
            sessions.auto.clone(),
            via,
            stop_load.clone(),
        ));
    }
    workers.spawn(load::background_launcher(
        seen.clone(),
        endpoints.clone(),
        round.clone(),
        sessions.auto.clone(),
        Duration::from_millis(600),
        stop_load.clone(),
    ));
    let card_keys: Vec<String> = (0..2).map(|i| format!("{round}-i{i}")).collect();
    let mut approvals = Vec::new();
    for (i, key) in card_keys.iter().enumerate() {
        approvals.push(load::approval_call(
            seen.clone(),
            endpoints.clone(),
            key.clone(),
            sessions.ask.clone(),
            SERVERS[i % SERVERS.len()],
            i % 2,
        ));
    }

    // ---- mid-call and mid-task: both cards open, a background call
    // working and foreground calls in flight (of the server the fault
    // hits, if it hits one).
    let hit = fault.server(rep);
    {
        let (endpoints, seen, ask, keys) = (
            endpoints.clone(),
            seen.clone(),
            sessions.ask.clone(),
            card_keys.clone(),
        );
        until("the load under way", LIMIT, || {
            let (endpoints, seen, ask, keys) =
                (endpoints.clone(), seen.clone(), ask.clone(), keys.clone());
            async move {
                let open = cards(&endpoints, &ask, &keys).await?;
                let open = open.values().filter(|c| c.status == "open").count();
                let background = seen.background_ids().len();
                let in_flight = seen.in_flight.load(Ordering::SeqCst);
                let on_hit = hit.map_or((1, 1), |server| {
                    (
                        seen.in_flight_to(server),
                        seen.background_ids_of(Some(server)).len(),
                    )
                });
                if open == keys.len()
                    && background >= 2
                    && in_flight >= 2
                    && on_hit.0 >= 1
                    && on_hit.1 >= 1
                {
                    Ok(())
                } else {
                    Err(format!(
                        "{open} cards open, {background} background calls, {in_flight} calls in flight; of {}: {} in flight, {} background",
                        hit.unwrap_or("-"),
                        on_hit.0,
                        on_hit.1
                    ))
                }
            }
        })
        .await?;
    }

    // ---- the fault, then healing.
    let side = fault.side(rep);
    let fault_at = Instant::now();
    let mut killed_upstreams = Vec::new();
    let target = inject(cluster, fault, rep, side, &mut killed_upstreams).await?;
    cluster.wait_healed(LIMIT * 2).await?;
    let heal = fault_at.elapsed();
    let healed_at = Instant::now();

    // ---- service is back through both replicas, to both servers: a
    // success that started after healing for each pair.
    {
        let seen = seen.clone();
        until(
            "successful calls to each server through each replica after healing",
            LIMIT,
            || {
                let seen = seen.clone();
                async move {
                    let calls = seen.calls.lock().unwrap();
                    let ok: BTreeSet<(&str, usize)> = calls
                        .iter()
                        .filter(|c| {
                            matches!(c.kind, Kind::Foreground | Kind::Stream | Kind::Probe)
                                && c.outcome == Outcome::Ok
                                && c.started >= healed_at
                        })
                        .map(|c| (c.server, c.via))
                        .collect();
                    if ok.len() == SERVERS.len() * 2 {
                        Ok(())
                    } else {
                        Err(format!(
                            "successes (server, replica) {ok:?} only, since the cluster healed"
                        ))
                    }
                }
            },
        )
        .await?;
    }

    // ---- the cards opened before the fault: found, then answered or closed,
    // once the lease window has passed. An approval whose waiting replica
    // died is closed within the lease TTL plus one sweep
    // (docs/reliability.md, "Chaos", defect 3); an answer inside that window
    // is taken and nothing runs, so answering earlier would count a
    // documented window as a defect, and answering after it checks the close.
    let window = Duration::from_secs(LEASE_TTL_SECS) + SWEEP_EVERY + Duration::from_secs(1);
    tokio::time::sleep(window.saturating_sub(fault_at.elapsed())).await;
    let mut report = RoundReport {
        fault: fault.name().to_owned(),
        rep,
        target,
        heal,
        ..Default::default()
    };
    let found = cards(&endpoints, &sessions.ask, &card_keys)
        .await
        .map_err(|e| anyhow!("ListInteractions after healing: {e}"))?;
    for key in &card_keys {
        match found.get(key) {
            None => report.problems.push(format!(
                "card of {key} lost: not listed (include_resolved) after the fault"
            )),
            Some(card) if card.status == "open" => {
                let mut answered = Err(String::new());
                for endpoint in endpoints.iter() {
                    let mut engine = load::engine(endpoint);
                    answered = engine
                        .answer_interaction(pb::AnswerInteractionRequest {
                            session_id: sessions.ask.clone(),
                            interaction_id: card.id.clone(),
                            action: "approve".into(),
                            content_json: String::new(),
                        })
                        .await
                        .map(|_| ())
                        .map_err(|e| format!("{}: {}", e.code(), e.message()));
                    if answered.is_ok() {
                        break;
                    }
                }
                match answered {
                    Ok(()) => report.cards_answered += 1,
                    Err(e) => report.problems.push(format!(
                        "card of {key} open after the fault but cannot be answered: {e}"
                    )),
                }
            }
            Some(card) => report
                .cards_closed
                .push(format!("{} ({})", card.outcome, card.status)),
        }
    }
    for approval in approvals {
        let _ = approval.await;
    }
    // A card answered after its call had already ended (its replica died):
    // the answer was taken but nothing waited for it.
    {
        let calls = seen.calls.lock().unwrap();
        for key in &card_keys {
            let answered = found.get(key).is_some_and(|c| c.status == "open");
            if let Some(c) = calls.iter().find(|c| &c.key == key)
                && answered
                && matches!(c.outcome, Outcome::Error(_))
            {
                report.orphaned_cards.push(format!(
                    "card of {key} (call through replica {}) was still open and took an approval after its call had failed with {:?} \"{}\"",
                    c.via,
                    c.outcome,
                    c.message
                ));
            }
        }
    }

    // ---- stop the load; every call has its outcome by now (bounded).
    stop_load.cancel();
    while workers.join_next().await.is_some() {}

    // ---- background calls: a terminal event on each subscription.
    let background = seen.background_ids();
    let ids: Vec<String> = background.keys().cloned().collect();
    {
        let (seen, ids) = (seen.clone(), ids.clone());
        let waited = until(
            "a terminal event of every background call on every subscription",
            LIMIT,
            || {
                let (seen, ids) = (seen.clone(), ids.clone());
                async move {
                    let events = seen.events.lock().unwrap();
                    let missing: Vec<String> = ids
                        .iter()
                        .flat_map(|id| (0..2).map(move |via| (id, via)))
                        .filter(|(id, via)| !events.iter().any(|e| &e.id == *id && e.via == *via))
                        .map(|(id, via)| format!("{id} via {via}"))
                        .collect();
                    if missing.is_empty() {
                        Ok(())
                    } else {
                        Err(format!("missing: {missing:?}"))
                    }
                }
            },
        )
        .await;
        if let Err(e) = waited {
            report
                .problems
                .push(format!("background result events lost: {e}"));
        }
    }
    stop_events.cancel();
    while tasks.join_next().await.is_some() {}
    check_background(cluster, sessions, &seen, &background, since_ms, &mut report).await;

    // ---- outcomes and executions.
    let calls = seen.calls.lock().unwrap().clone();
    count_outcomes(&calls, fault_at, hit, &mut report);
    let executions = executions(cluster);
    check_executions(&executions, &calls, &mut report);
    check_task_results(&executions, &calls, &seen, &killed_upstreams, &mut report);
    if fault == Fault::HttpUpstreamKill {
        check_back_after_restart(&calls, &seen, healed_at, HTTP_SERVER, &mut report);
    }
    report.stream_breaks = seen.breaks.lock().unwrap().values().sum();
    report.wall = round_start.elapsed();
    Ok(report)
}

/// Injects `fault` (on side `side`: which replica or sidecar; in
/// repetition `rep`), holds it, and starts again what it killed. Returns
/// what it hit. The upstream server processes it killed (directly, or with
/// their sidecar) are added to `killed`.
async fn inject(
    cluster: &mut Cluster,
    fault: Fault,
    rep: u32,
    side: usize,
    killed: &mut Vec<u32>,
) -> anyhow::Result<String> {
    match fault {
        Fault::EtcdLeaderKill => {
            let leader = cluster
                .etcd_leader()
                .await
                .ok_or_else(|| anyhow!("no etcd member says it is the leader"))?;
            let name = cluster.etcd[leader].name.clone();
            if let Some(p) = cluster.etcd[leader].proc.as_mut() {
                p.kill9().await;
            }
            // The two others elect a leader and serve meanwhile.
            let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
            let mut elected = false;
            let deadline = Instant::now() + LIMIT;
            while !elected && Instant::now() < deadline {
                for i in &others {
                    let port = cluster.etcd[*i].client_port;
                    if let Some(m) = crate::cluster::http_get(port, "/metrics").await
                        && m.lines().any(|l| l.trim() == "etcd_server_is_leader 1")
                    {
                        elected = true;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            cluster.spawn_etcd(leader).await?;
            cluster.wait_etcd(leader).await?;
            Ok(format!("{name} (leader)"))
        }
        Fault::ReplicaKill => {
            let name = cluster.replicas[side].name.clone();
            if let Some(p) = cluster.replicas[side].proc.as_mut() {
                p.kill9().await;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
            cluster.spawn_replica(side).await?;
            Ok(name)
        }
        Fault::SidecarKill => {
            let server = fault.server(rep).unwrap_or(SERVER);
            let i = cluster.sidecar_of(server, side);
            let name = cluster.sidecars[i].id();
            // An `orders` sidecar's stdio server dies with it; the HTTP
            // server of an `orders-http` sidecar lives on (and so do its
            // tasks, which the other sidecar adopts).
            let upstream = cluster.upstream_pid(i);
            killed.extend(upstream);
            if let Some(p) = cluster.sidecars[i].proc.as_mut() {
                p.kill9().await;
            }
            // Its stdio server sees its stdin close and exits; make sure.
            if let Some(pid) = upstream {
                let gone = || !std::path::Path::new(&format!("/proc/{pid}")).exists();
                let deadline = Instant::now() + Duration::from_secs(5);
                while !gone() && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if !gone() {
                    signal(pid, Signal::SIGKILL);
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            cluster.spawn_sidecar(i).await?;
            Ok(name)
        }
        Fault::UpstreamKill => {
            let i = cluster.sidecar_of(SERVER, side);
            let pid = cluster.upstream_pid(i).ok_or_else(|| {
                anyhow!(
                    "sidecar {} has no upstream process",
                    cluster.sidecars[i].id()
                )
            })?;
            signal(pid, Signal::SIGKILL);
            killed.push(pid);
            // The sidecar restarts it by itself.
            Ok(format!(
                "reference server (pid {pid}) of {}",
                cluster.sidecars[i].id()
            ))
        }
        Fault::HttpUpstreamKill => {
            // No sidecar owns it: the driver starts it again, on the same
            // port, and the sidecars find it there (new MCP sessions).
            let proc = cluster
                .http_server
                .proc
                .as_mut()
                .ok_or_else(|| anyhow!("{HTTP_SERVER}'s reference server is not running"))?;
            let pid = proc.pid;
            proc.kill9().await;
            killed.push(pid);
            tokio::time::sleep(Duration::from_secs(1)).await;
            cluster.spawn_http_server().await?;
            Ok(format!(
                "{HTTP_SERVER}'s HTTP reference server (pid {pid}), 1 s"
            ))
        }
        Fault::ReplicaStop => {
            let name = cluster.replicas[side].name.clone();
            let pid = cluster.replicas[side]
                .proc
                .as_ref()
                .map(|p| p.pid)
                .ok_or_else(|| anyhow!("{name} is not running"))?;
            signal(pid, Signal::SIGSTOP);
            tokio::time::sleep(Duration::from_secs(LEASE_TTL_SECS + 2)).await;
            signal(pid, Signal::SIGCONT);
            Ok(format!("{name} ({} s)", LEASE_TTL_SECS + 2))
        }
        Fault::EtcdCut => {
            for p in &cluster.proxies {
                p.cut();
            }
            tokio::time::sleep(Duration::from_secs(LEASE_TTL_SECS + 3)).await;
            for p in &cluster.proxies {
                p.restore();
            }
            Ok(format!(
                "{} from etcd ({} s)",
                cluster.replicas[1].name,
                LEASE_TTL_SECS + 3
            ))
        }
    }
}

/// Background calls: one consistent terminal state each, never twice on a
/// stream, the store agrees, and a fresh subscription replays each once.
async fn check_background(
    cluster: &Cluster,
    sessions: &Sessions,
    seen: &Seen,
    background: &BTreeMap<String, String>,
    since_ms: i64,
    report: &mut RoundReport,
) {
    let events = seen.events.lock().unwrap().clone();
    for (id, key) in background {
        let mine: Vec<_> = events.iter().filter(|e| &e.id == id).collect();
        let kinds: BTreeSet<&str> = mine.iter().map(|e| e.kind.as_str()).collect();
        if kinds.len() > 1 {
            report.problems.push(format!(
                "background call {id} ({key}) has conflicting results: {kinds:?}"
            ));
        }
        let mut per_stream: BTreeMap<(usize, u32), usize> = BTreeMap::new();
        for e in &mine {
            *per_stream.entry((e.via, e.stream)).or_default() += 1;
        }
        for ((via, stream), n) in per_stream {
            if n > 1 {
                report.problems.push(format!(
                    "background call {id} ({key}): {n} result events on one stream (replica {via}, subscription {stream})"
                ));
            }
        }
        if let Some(e) = mine.first() {
            *report.background.entry(e.status.clone()).or_default() += 1;
            if e.status != "completed" {
                report.notes.push(format!(
                    "background call {id} ({key}) {}: {}",
                    e.status, e.message
                ));
            }
        }
    }
    // The store's view, through each replica.
    for endpoint in cluster.replicas.iter().map(|r| r.endpoint()) {
        let mut engine = load::engine(&endpoint);
        for (id, key) in background {
            match engine
                .get_background_call(pb::GetBackgroundCallRequest {
                    id: id.clone(),
                    session_id: sessions.auto.clone(),
                })
                .await
            {
                Ok(b) => {
                    let b = b.into_inner();
                    if !matches!(b.status.as_str(), "completed" | "failed" | "cancelled") {
                        report.problems.push(format!(
                            "background call {id} ({key}) is still {} through {endpoint} after its result event",
                            b.status
                        ));
                    }
                }
                Err(e) => report.problems.push(format!(
                    "background call {id} ({key}) not found through {endpoint}: {}: {}",
                    e.code(),
                    e.message()
                )),
            }
        }
    }
    // A fresh subscription, through each replica, finds every result once.
    let ids: Vec<String> = background.keys().cloned().collect();
    for endpoint in cluster.replicas.iter().map(|r| r.endpoint()) {
        match load::replay(
            &endpoint,
            &sessions.auto,
            since_ms,
            &ids,
            Duration::from_secs(15),
        )
        .await
        {
            Err(e) => report
                .problems
                .push(format!("resubscribing through {endpoint}: {e}")),
            Ok(got) => {
                for id in &ids {
                    match got.get(id).map(Vec::len) {
                        Some(1) => {}
                        None => report.problems.push(format!(
                            "a new subscription through {endpoint} does not replay background call {id}"
                        )),
                        Some(n) => report.problems.push(format!(
                            "a new subscription through {endpoint} replays background call {id} {n} times"
                        )),
                    }
                }
            }
        }
    }
}

/// Counts outcomes, calls without one, and the recovery time (on the
/// probes of server `hit`, when the fault hit one).
fn count_outcomes(
    calls: &[CallRecord],
    fault_at: Instant,
    hit: Option<&str>,
    report: &mut RoundReport,
) {
    report.calls = calls.len();
    for c in calls {
        match &c.outcome {
            Outcome::Ok => report.ok += 1,
            Outcome::ToolError => {
                report.tool_errors += 1;
                report.notes.push(format!(
                    "{} {}: tool error: {}",
                    c.name(),
                    c.key,
                    c.message.chars().take(160).collect::<String>()
                ));
            }
            Outcome::Backgrounded(_) => report.backgrounded += 1,
            Outcome::Error(code) => {
                // tonic's own error when the connection to the replica broke
                // (a unary call's, and a CallToolStream's for its calls in
                // flight).
                let lost_connection = *code == tonic::Code::Unknown
                    && (c.message == "transport error"
                        || c.message
                            .starts_with("h2 protocol error: error reading a body"));
                let kind = if lost_connection {
                    "connection lost".to_owned()
                } else {
                    format!("{code:?}")
                };
                let count = report.errors.entry(kind.clone()).or_default();
                *count += 1;
                if *count == 1 {
                    report.notes.push(format!(
                        "first {kind} error: {} {} via replica {}: {}",
                        c.name(),
                        c.key,
                        c.via,
                        c.message.chars().take(200).collect::<String>()
                    ));
                }
                if (*code == tonic::Code::Unknown && !lost_connection) || c.message.is_empty() {
                    report.notes.push(format!(
                        "{} {} via {}: unclear error {code:?}: {:?}",
                        c.name(),
                        c.key,
                        c.via,
                        c.message
                    ));
                }
            }
            Outcome::None => report.problems.push(format!(
                "{} {} via replica {}: no outcome within {:?}",
                c.name(),
                c.key,
                c.via,
                load::CALL_LIMIT
            )),
        }
    }
    // From the probes (of the server the fault hit, if it hit one): the
    // first success after the fault, through either replica, and through
    // each of them.
    let first_ok = |via: Option<usize>| {
        calls
            .iter()
            .filter(|c| {
                c.kind == Kind::Probe
                    && c.outcome == Outcome::Ok
                    && c.started >= fault_at
                    && via.is_none_or(|v| c.via == v)
                    && hit.is_none_or(|s| c.server == s)
            })
            .map(|c| c.ended.duration_since(fault_at))
            .min()
    };
    // The calls in flight to the server the fault hit, and how they ended.
    if let Some(server) = hit {
        let mut ended: BTreeMap<String, usize> = BTreeMap::new();
        for c in calls
            .iter()
            .filter(|c| c.server == server && c.started <= fault_at && c.ended >= fault_at)
        {
            let how = match &c.outcome {
                Outcome::Error(code) => format!("{code:?}"),
                Outcome::Backgrounded(_) => "backgrounded".into(),
                other => format!("{other:?}"),
            };
            *ended.entry(how).or_default() += 1;
        }
        report.notes.push(format!(
            "calls to {server} in flight at the fault: {}, ended {ended:?}",
            ended.values().sum::<usize>()
        ));
    }
    report.recovery = first_ok(None);
    report.recovery_all = (0..2)
        .map(|via| first_ok(Some(via)))
        .collect::<Option<Vec<_>>>()
        .and_then(|each| each.into_iter().max());
}

/// `http-upstream-kill`: once the cluster healed, the HTTP server listens
/// again, so every call to it that started after that succeeds (a result,
/// or a background call that completes) whichever sidecar it reaches: each
/// sidecar opened a new MCP session (a stale `Mcp-Session-Id` gets 404 and
/// the request is sent once on a new session, which the new process never
/// saw) or connected again. A failure there is a sidecar that did not come
/// back.
fn check_back_after_restart(
    calls: &[CallRecord],
    seen: &Seen,
    healed_at: Instant,
    server: &str,
    report: &mut RoundReport,
) {
    let events = seen.events.lock().unwrap();
    for c in calls
        .iter()
        .filter(|c| c.server == server && c.started >= healed_at && c.kind != Kind::Approval)
    {
        let failure = match &c.outcome {
            Outcome::Ok => None,
            Outcome::Backgrounded(id) => events
                .iter()
                .find(|e| &e.id == id && e.status != "completed")
                .map(|e| format!("background call {id} {}: {}", e.status, e.message)),
            other => Some(format!("{other:?}: {}", c.message)),
        };
        if let Some(failure) = failure {
            report.problems.push(format!(
                "{} {} via replica {} started after {server} was back and the cluster healed, yet failed: {failure}",
                c.name(),
                c.key,
                c.via
            ));
        }
    }
}

/// Reads the execution log: a call that is not read-only ran at most once;
/// a call that succeeded ran at least once.
fn check_executions(
    runs: &BTreeMap<String, Vec<u32>>,
    calls: &[CallRecord],
    report: &mut RoundReport,
) {
    for c in calls {
        let n = runs.get(&c.key).map_or(0, Vec::len);
        let read_only = c.tool == "echo";
        if n > 1 && read_only {
            report.read_only_repeats += n - 1;
        } else if n > 1 {
            report.problems.push(format!(
                "{} {} (not read-only) ran {n} times upstream; its outcome: {:?} {}",
                c.name(),
                c.key,
                c.outcome,
                c.message
            ));
        }
        let succeeded = matches!(c.outcome, Outcome::Ok | Outcome::Backgrounded(_));
        if succeeded && n == 0 && c.kind != Kind::Background {
            report.problems.push(format!(
                "{} {} succeeded but never ran upstream",
                c.name(),
                c.key
            ));
        }
    }
}

/// The execution log: each key's executions, as the pids of the server
/// processes that ran them (lines `TOOL KEY PID`).
fn executions(cluster: &Cluster) -> BTreeMap<String, Vec<u32>> {
    let log = std::fs::read_to_string(&cluster.executions).unwrap_or_default();
    let mut runs: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for line in log.lines() {
        let mut fields = line.split_whitespace().skip(1);
        if let (Some(key), Some(pid)) = (fields.next(), fields.next()) {
            let pid = pid.parse().unwrap_or(0);
            runs.entry(key.to_owned()).or_default().push(pid);
        }
    }
    runs
}

/// A task that failed as "task not found" although the server process
/// that created it was never killed: it ran on there, and its result was
/// lost (the call was failed by a sidecar whose server never had it).
fn check_task_results(
    runs: &BTreeMap<String, Vec<u32>>,
    calls: &[CallRecord],
    seen: &Seen,
    killed: &[u32],
    report: &mut RoundReport,
) {
    let events = seen.events.lock().unwrap();
    for c in calls.iter().filter(|c| c.tool == "task_sleep") {
        let failure = match &c.outcome {
            Outcome::Backgrounded(id) => events
                .iter()
                .find(|e| &e.id == id && e.status == "failed")
                .map(|e| format!("background call {id}: {}", e.message)),
            Outcome::Error(code) => Some(format!("{code:?}: {}", c.message)),
            _ => None,
        };
        let Some(failure) = failure.filter(|f| f.contains("task not found")) else {
            continue;
        };
        let Some(&pid) = runs.get(&c.key).and_then(|p| p.first()) else {
            continue;
        };
        if !killed.contains(&pid) {
            report.results_lost.push(format!(
                "{} ({:?}): its task was created by server process {pid}, which was not killed, yet the call failed: {failure}",
                c.key, c.kind
            ));
        }
    }
}
