//! Read-modify-write of one key as a compare-and-swap transaction, retried
//! while other writers get there first.
//!
//! [`update`] reads the key, lets the caller's `decide` look at what it read
//! (the key's [`KeyValue`], or `None` when absent) and say what to do
//! ([`Decision`]): keep the key as it is, or write a new value. A write runs
//! in one transaction that holds only if the key is still at the revision
//! that was read (`mod_revision`, 0 for "still absent"), and if the extra
//! compares the decision may add (other keys the decision was based on)
//! hold too. When a compare fails, someone else wrote in between: `update`
//! waits a random moment ([`backoff`]), reads again and asks `decide`
//! again, [`MAX_CAS_ATTEMPTS`] times at most, then gives up with
//! [`CasError::Exhausted`].
//!
//! `decide` is a closure that returns a future, so it may read other keys
//! or take a lease for its write. It gets the key as read, owned, and its
//! future should own or copy what it uses (`async move` over references
//! taken outside): a plain closure and an owned future keep the whole
//! update `Send`, which an `async` closure borrowing its captures does not
//! (the compiler cannot prove it for every lifetime). It runs once per
//! attempt, so it must not have effects that a lost attempt would leave
//! behind. Its own error ends the update at once ([`CasError::Decide`]).
//!
//! ```ignore
//! let step = &step;
//! let updated = cas::update(&store, "counters/a", |old| async move {
//!     let n: u64 = old.and_then(|kv| serde_json::from_slice(&kv.value).ok()).unwrap_or(0);
//!     let next = n + step;
//!     Ok::<_, MyError>(Decision::Write(Write::put(serde_json::to_vec(&next)?), next))
//! })
//! .await
//! .map_err(|e| e.into_error(|| MyError::Contention("counters/a".into())))?;
//! // updated.value == next, updated.revision: the write's revision
//! ```

use super::{Compare, KeyValue, LeaseId, Op, Revision, Store, StoreError, Txn};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How many times [`update`] reads, decides and tries its transaction
/// before giving up with [`CasError::Exhausted`].
pub const MAX_CAS_ATTEMPTS: usize = 20;

/// The longest wait before an attempt, after lost ones ([`backoff`]).
pub const MAX_CAS_BACKOFF: Duration = Duration::from_millis(128);

/// How long [`update`] waits before attempt `attempt` (from 1; the first
/// goes at once): a random time up to 1 ms doubled per lost attempt, at
/// most [`MAX_CAS_BACKOFF`] (full jitter), so writers that collided do not
/// collide again in lockstep. Twenty attempts then span about a second
/// (two at most), time for a burst of a few dozen writes of one key.
fn backoff(attempt: usize) -> Duration {
    let cap = Duration::from_millis(1 << attempt.min(7)).min(MAX_CAS_BACKOFF);
    cap.mul_f64(rand::random::<f64>())
}

/// Writers of one key in this process taking turns: [`Turns::take`] waits
/// for the key's turn, held until the guard drops. An [`update`] made in
/// its turn loses only to writers in other processes, so a burst of writes
/// of one hot key (an MCP session's record: its GET streams, its logging
/// level) all land however many there are, where [`backoff`] alone fits
/// a few dozen in the attempts.
#[derive(Debug, Default)]
pub struct Turns {
    keys: std::sync::Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Turns {
    /// Waits for `key`'s turn (fair: first come, first served).
    pub async fn take(&self, key: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = {
            let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
            if keys.len() >= 64 {
                keys.retain(|_, t| t.strong_count() > 0);
            }
            match keys.get(key).and_then(Weak::upgrade) {
                Some(turn) => turn,
                None => {
                    let turn = Arc::new(tokio::sync::Mutex::new(()));
                    keys.insert(key.to_owned(), Arc::downgrade(&turn));
                    turn
                }
            }
        };
        turn.lock_owned().await
    }
}

/// What `decide` wants done with the key it was shown; `T` is what
/// [`update`] hands back in [`Updated::value`].
#[derive(Debug)]
pub enum Decision<T> {
    /// Write nothing: the key stays as it was read.
    Keep(T),
    /// Write, if the key is still as it was read (and the write's own
    /// compares hold); otherwise read and decide again.
    Write(Write, T),
}

/// The write of a [`Decision::Write`]: a put of the key [`update`] was
/// given, with an optional lease and extra compares. (No caller needs to
/// delete the key or write other keys in the same transaction, so a
/// `Write` does neither.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    value: Vec<u8>,
    lease: Option<LeaseId>,
    compares: Vec<Compare>,
}

impl Write {
    /// Puts `value` (the bytes to store, as [`Store::put`] takes them) at
    /// the key, without a lease.
    pub fn put(value: impl Into<Vec<u8>>) -> Self {
        Write {
            value: value.into(),
            lease: None,
            compares: Vec::new(),
        }
    }

    /// Attaches the key to `lease`. If the lease is gone when the
    /// transaction runs, [`update`] fails with
    /// [`CasError::Store`]`(`[`StoreError::LeaseNotFound`]`)`.
    pub fn with_lease(mut self, lease: LeaseId) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Adds compares on other keys that must hold as well (for a value
    /// derived from them); when one fails, the attempt is lost and retried
    /// like a change of the key itself.
    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Self {
        self.compares.extend(compares);
        self
    }
}

/// What [`update`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Updated<T> {
    /// What `decide` returned with the decision that ended the update.
    pub value: T,
    /// Whether this update wrote (false: `decide` kept the key).
    pub written: bool,
    /// When written, the revision of the write; when kept, the key's
    /// `mod_revision` as read (0: absent).
    pub revision: Revision,
}

/// Why [`update`] failed. `E` is the error type of `decide`.
#[derive(Debug, thiserror::Error)]
pub enum CasError<E> {
    /// Reading the key or running the transaction failed.
    #[error(transparent)]
    Store(StoreError),
    /// `decide` returned this error.
    #[error(transparent)]
    Decide(E),
    /// Every attempt lost to another writer.
    #[error("too much contention updating {key}: it changed during each of {attempts} attempts")]
    Exhausted {
        /// The key (relative to the store's root).
        key: String,
        /// How many attempts were made ([`MAX_CAS_ATTEMPTS`]).
        attempts: usize,
    },
}

impl<E: From<StoreError>> CasError<E> {
    /// Turns this into the caller's own error: a store failure through
    /// `E::from`, `decide`'s error as it is, and exhaustion as
    /// `contention()` (callers have their own "try again" error).
    pub fn into_error(self, contention: impl FnOnce() -> E) -> E {
        match self {
            CasError::Store(e) => E::from(e),
            CasError::Decide(e) => e,
            CasError::Exhausted { .. } => contention(),
        }
    }
}

/// Reads `key` (relative to the store's root), asks `decide` what to do
/// with it (the [`KeyValue`] read, `None` when absent) and writes by
/// compare-and-swap, retrying from the read (after [`backoff`]) while
/// another writer changed the key (or a key of the write's extra compares)
/// in between, up to [`MAX_CAS_ATTEMPTS`] attempts. Each attempt is one [`Store::get`] then,
/// for a write, one [`Store::txn`] that puts the key and nothing else.
///
/// Errors: [`CasError::Store`] when the store fails (also a lease that is
/// gone, see [`Write::with_lease`]), [`CasError::Decide`] when `decide`
/// does, [`CasError::Exhausted`] when every attempt lost.
pub async fn update<S, T, E, F, Fut>(
    store: &S,
    key: &str,
    mut decide: F,
) -> Result<Updated<T>, CasError<E>>
where
    S: Store,
    F: FnMut(Option<KeyValue>) -> Fut,
    Fut: Future<Output = Result<Decision<T>, E>>,
{
    for attempt in 0..MAX_CAS_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(backoff(attempt)).await;
        }
        let old = store.get(key).await.map_err(CasError::Store)?;
        let read_at = old.as_ref().map_or(0, |kv| kv.mod_revision);
        let (write, value) = match decide(old).await.map_err(CasError::Decide)? {
            Decision::Keep(value) => {
                return Ok(Updated {
                    value,
                    written: false,
                    revision: read_at,
                });
            }
            Decision::Write(write, value) => (write, value),
        };
        let mut compares = vec![Compare::mod_revision(key, read_at)];
        compares.extend(write.compares);
        let put = Op::Put {
            key: key.to_owned(),
            value: write.value,
            lease: write.lease,
        };
        let r = store
            .txn(Txn::new().when(compares).and_then([put]))
            .await
            .map_err(CasError::Store)?;
        if r.succeeded {
            return Ok(Updated {
                value,
                written: true,
                revision: r.revision,
            });
        }
    }
    Err(CasError::Exhausted {
        key: key.to_owned(),
        attempts: MAX_CAS_ATTEMPTS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{EmbeddedConfig, EmbeddedStore};
    use std::future::ready;

    async fn store(dir: &tempfile::TempDir) -> EmbeddedStore {
        EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("s.redb")))
            .await
            .unwrap()
    }

    /// The number stored at a key (0 when absent).
    fn number(kv: Option<&KeyValue>) -> u64 {
        kv.map_or(0, |kv| String::from_utf8_lossy(&kv.value).parse().unwrap())
    }

    #[derive(Debug, thiserror::Error)]
    enum TestError {
        #[error("store: {0}")]
        Store(#[from] StoreError),
        #[error("contention")]
        Contention,
        #[error("refused {0}")]
        Refused(u64),
    }

    /// Adds one to the number at the key.
    fn increment(old: Option<KeyValue>) -> impl Future<Output = Result<Decision<u64>, TestError>> {
        let n = number(old.as_ref()) + 1;
        ready(Ok(Decision::Write(Write::put(n.to_string()), n)))
    }

    #[tokio::test]
    async fn a_write_creates_then_updates_at_the_revision_read() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        let first = update(&s, "n", increment).await.unwrap();
        assert_eq!((first.value, first.written), (1, true));
        let second = update(&s, "n", increment).await.unwrap();
        assert_eq!((second.value, second.written), (2, true));
        assert!(second.revision > first.revision);
        let kv = s.get("n").await.unwrap().unwrap();
        assert_eq!(
            (kv.value.as_slice(), kv.mod_revision, kv.version),
            (&b"2"[..], second.revision, 2)
        );
    }

    #[tokio::test]
    async fn a_conflicting_write_is_retried_from_a_fresh_read() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        s.put("n", b"10".to_vec(), None).await.unwrap();
        let mut seen = Vec::new();
        let updated = update(&s, "n", |old| {
            let n = number(old.as_ref());
            seen.push(n);
            let first = seen.len() == 1;
            let s = &s;
            async move {
                if first {
                    // Another writer changes the key after this read.
                    s.put("n", b"20".to_vec(), None).await?;
                }
                Ok::<_, TestError>(Decision::Write(Write::put((n + 1).to_string()), n + 1))
            }
        })
        .await
        .unwrap();
        assert_eq!(seen, [10, 20], "the lost attempt read again");
        assert_eq!((updated.value, updated.written), (21, true));
        let kv = s.get("n").await.unwrap().unwrap();
        assert_eq!(kv.value, b"21", "the other writer's 20 was not lost");
        assert_eq!(kv.mod_revision, updated.revision);
    }

    #[tokio::test]
    async fn a_key_that_keeps_changing_exhausts_the_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        let mut attempts = 0;
        let e = update(&s, "n", |old| {
            attempts += 1;
            let n = number(old.as_ref());
            let s = &s;
            async move {
                s.put("n", (n + 100).to_string().into_bytes(), None).await?;
                Ok::<_, TestError>(Decision::Write(Write::put((n + 1).to_string()), ()))
            }
        })
        .await
        .unwrap_err();
        assert_eq!(attempts, MAX_CAS_ATTEMPTS);
        assert!(
            matches!(&e, CasError::Exhausted { key, attempts } if key == "n" && *attempts == MAX_CAS_ATTEMPTS),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "too much contention updating n: it changed during each of 20 attempts"
        );
        assert!(matches!(
            e.into_error(|| TestError::Contention),
            TestError::Contention
        ));
        let kv = s.get("n").await.unwrap().unwrap();
        assert_eq!(kv.value, b"2000", "only the other writer's puts landed");
    }

    #[tokio::test]
    async fn keep_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        let absent = update(&s, "n", |old| {
            ready(Ok::<_, TestError>(Decision::Keep(old.is_none())))
        })
        .await
        .unwrap();
        assert_eq!(
            (absent.value, absent.written, absent.revision),
            (true, false, 0)
        );
        assert!(s.get("n").await.unwrap().is_none());

        let rev = s.put("n", b"5".to_vec(), None).await.unwrap();
        let kept = update(&s, "n", |old| {
            ready(Ok::<_, TestError>(Decision::Keep(number(old.as_ref()))))
        })
        .await
        .unwrap();
        assert_eq!((kept.value, kept.written, kept.revision), (5, false, rev));
        let listing = s.list("").await.unwrap();
        assert_eq!(listing.revision, rev, "the store's revision did not move");
        assert_eq!(listing.kvs[0].version, 1);
    }

    #[tokio::test]
    async fn a_decide_error_ends_the_update_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        s.put("n", b"7".to_vec(), None).await.unwrap();
        let mut calls = 0;
        let e = update(&s, "n", |old| {
            calls += 1;
            ready(Err::<Decision<()>, _>(TestError::Refused(number(
                old.as_ref(),
            ))))
        })
        .await
        .unwrap_err();
        assert_eq!(calls, 1);
        assert!(
            matches!(e, CasError::Decide(TestError::Refused(7))),
            "{e:?}"
        );
        assert_eq!(
            e.into_error(|| TestError::Contention).to_string(),
            "refused 7"
        );
    }

    #[tokio::test]
    async fn extra_compares_guard_the_keys_the_value_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        s.put("src/a", b"1".to_vec(), None).await.unwrap();
        let mut attempts = 0;
        let updated = update(&s, "sum", |_old| {
            attempts += 1;
            let first = attempts == 1;
            let s = &s;
            async move {
                let listing = s.list("src/").await?;
                let sum: u64 = listing.kvs.iter().map(|kv| number(Some(kv))).sum();
                if first {
                    // A source changes after it was read: the sum is stale.
                    s.put("src/a", b"3".to_vec(), None).await?;
                }
                let compares = listing
                    .kvs
                    .iter()
                    .map(|kv| Compare::mod_revision(&kv.key, kv.mod_revision));
                Ok::<_, TestError>(Decision::Write(
                    Write::put(sum.to_string()).when(compares),
                    sum,
                ))
            }
        })
        .await
        .unwrap();
        assert_eq!((attempts, updated.value), (2, 3));
        assert_eq!(s.get("sum").await.unwrap().unwrap().value, b"3");
    }

    #[tokio::test]
    async fn a_leased_write_attaches_the_lease_and_a_gone_lease_is_a_store_error() {
        let dir = tempfile::tempdir().unwrap();
        let s = store(&dir).await;
        let lease = s.grant_lease(Duration::from_secs(30)).await.unwrap();
        let put = |_old: Option<KeyValue>| {
            ready(Ok::<_, TestError>(Decision::Write(
                Write::put("x").with_lease(lease),
                (),
            )))
        };
        update(&s, "k", put).await.unwrap();
        assert_eq!(s.get("k").await.unwrap().unwrap().lease, Some(lease));

        s.revoke(lease).await.unwrap();
        let e = update(&s, "k", put).await.unwrap_err();
        assert!(
            matches!(e, CasError::Store(StoreError::LeaseNotFound { lease: l, .. }) if l == lease),
            "{e:?}"
        );
        assert!(
            s.get("k").await.unwrap().is_none(),
            "revoked with its lease"
        );
    }

    /// The update's future is `Send` when `decide`'s is, even when the
    /// future holds references (what tonic handlers need).
    #[test]
    fn the_update_future_is_send() {
        fn send<T: Send>(_: &T) {}
        let dir = tempfile::tempdir().unwrap();
        let s = tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(store(&dir));
        let suffix = String::from("!");
        let suffix = &suffix;
        let f = update(&s, "k", |old| async move {
            let v = format!("{}{suffix}", number(old.as_ref()));
            Ok::<_, TestError>(Decision::Write(Write::put(v), ()))
        });
        send(&f);
    }

    /// Many writers of one key at once (a client opening dozens of streams
    /// on one session): each lands, none runs out of attempts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn many_writers_at_once_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let s = std::sync::Arc::new(store(&dir).await);
        let writers: Vec<_> = (0..32)
            .map(|_| {
                let s = s.clone();
                tokio::spawn(async move { update(&*s, "n", increment).await.map(|u| u.value) })
            })
            .collect();
        let mut lost = 0;
        for w in writers {
            if w.await.unwrap().is_err() {
                lost += 1;
            }
        }
        assert_eq!(lost, 0, "writers that ran out of attempts");
        assert_eq!(s.get("n").await.unwrap().unwrap().value, b"32");
    }

    /// Writers that take turns never collide: one attempt each.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn writers_taking_turns_never_collide() {
        let dir = tempfile::tempdir().unwrap();
        let s = std::sync::Arc::new(store(&dir).await);
        let turns = std::sync::Arc::new(Turns::default());
        let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let writers: Vec<_> = (0..100)
            .map(|_| {
                let (s, turns, attempts) = (s.clone(), turns.clone(), attempts.clone());
                tokio::spawn(async move {
                    let _turn = turns.take("n").await;
                    update(&*s, "n", |old| {
                        attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        increment(old)
                    })
                    .await
                    .map(|u| u.value)
                })
            })
            .collect();
        for w in writers {
            w.await.unwrap().unwrap();
        }
        assert_eq!(s.get("n").await.unwrap().unwrap().value, b"100");
        assert_eq!(attempts.load(std::sync::atomic::Ordering::Relaxed), 100);
        // Other keys are not held up by one that is in use.
        let _held = turns.take("n").await;
        let other = tokio::time::timeout(Duration::from_secs(1), turns.take("m")).await;
        assert!(other.is_ok());
    }
}
