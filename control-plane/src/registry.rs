//! Writes to the shared state: servers, sidecar registrations (under
//! leases), catalogues with `toolsUpdatedAt`, the engine-visible name map,
//! sessions. Every read-modify-write is a compare-and-swap transaction, so
//! replicas never lose each other's updates. A server's secret-looking
//! header and environment values and URL parts are written sealed when a key ring is
//! configured ([`crate::oauth::server_secrets`]).

use crate::oauth::server_secrets as secrets;

use crate::model::encode;
use crate::model::*;
use crate::names::NameMap;
use crate::store::cas::{self, Decision, Write};
use crate::store::{AnyStore, Compare, LeaseId, Metered, Op, Revision, Store, StoreError, Txn};
use serde_json::Value;
use std::time::Duration;
use switchyard_common::server_spec::ServerConfig;

/// A registry operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No such server.
    #[error("server {0:?} is not configured")]
    UnknownServer(String),
    /// The server exists already.
    #[error("server {0:?} already exists")]
    ServerExists(String),
    /// No such session.
    #[error("session {0:?} not found")]
    UnknownSession(String),
    /// A CAS loop kept losing.
    #[error("too much contention updating {0}; try again")]
    Contention(String),
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// A caller asked for more than its share (e.g. cancellations of calls
    /// this replica does not run).
    #[error("{0}")]
    Exhausted(String),
}

/// The write side.
#[derive(Debug, Clone)]
pub struct Registry {
    store: Metered<AnyStore>,
    cancels: std::sync::Arc<CancelBudget>,
    /// Seals servers' secret values at rest ([`secrets`]); `None`: they
    /// are stored as given.
    ring: Option<std::sync::Arc<crate::oauth::KeyRing>>,
    /// This replica's writers of one MCP session record take turns
    /// ([`crate::store::cas::Turns`]).
    mcp_session_turns: std::sync::Arc<crate::store::cas::Turns>,
}

impl Registry {
    /// A registry over `store` (metered: its operations are counted in the
    /// store metrics).
    pub fn new(store: Metered<AnyStore>) -> Self {
        Registry {
            store,
            cancels: Default::default(),
            ring: None,
            mcp_session_turns: Default::default(),
        }
    }

    /// This registry, sealing servers' secret values with `ring`.
    pub fn with_key_ring(mut self, ring: Option<std::sync::Arc<crate::oauth::KeyRing>>) -> Self {
        self.ring = ring;
        self
    }

    /// `spec` as it is stored: its secret values sealed when there is a
    /// key ring.
    fn at_rest(&self, mut spec: ServerConfig) -> ServerConfig {
        if let Some(ring) = &self.ring {
            secrets::seal(ring, &mut spec);
        }
        spec
    }

    /// The store.
    pub fn store(&self) -> &Metered<AnyStore> {
        &self.store
    }

    /// Adds a server. Errors: it exists already.
    pub async fn add_server(
        &self,
        spec: ServerConfig,
        origin: Origin,
    ) -> Result<Revision, RegistryError> {
        let key = server_key(&spec.name);
        let rec = ServerRecord {
            spec: self.at_rest(spec),
            origin,
        };
        let r = self
            .store
            .txn(
                Txn::new()
                    .when([Compare::absent(&key)])
                    .and_then([Op::put(&key, encode(&rec))]),
            )
            .await?;
        if !r.succeeded {
            return Err(RegistryError::ServerExists(rec.spec.name));
        }
        Ok(r.revision)
    }

    /// Replaces a server's spec. Errors: unknown server.
    pub async fn update_server(&self, spec: ServerConfig) -> Result<Revision, RegistryError> {
        let key = server_key(&spec.name);
        let Some(old) = self.store.get(&key).await? else {
            return Err(RegistryError::UnknownServer(spec.name));
        };
        let origin = serde_json::from_slice::<ServerRecord>(&old.value)
            .map(|r| r.origin)
            .unwrap_or(Origin::Admin);
        let rec = ServerRecord {
            spec: self.at_rest(spec),
            origin,
        };
        let r = self
            .store
            .txn(
                Txn::new()
                    .when([Compare::mod_revision(&key, old.mod_revision)])
                    .and_then([Op::put(&key, encode(&rec))]),
            )
            .await?;
        if !r.succeeded {
            return Err(RegistryError::Contention(key));
        }
        Ok(r.revision)
    }

    /// Removes a server, its catalogue, and its tools' hint overrides and
    /// policies (a server added later under the same name starts without
    /// them); its names disappear from the map.
    pub async fn remove_server(&self, name: &str) -> Result<Revision, RegistryError> {
        let existed = self.store.delete(&server_key(name)).await?;
        if !existed {
            return Err(RegistryError::UnknownServer(name.to_owned()));
        }
        self.store.delete(&tools_key(name)).await?;
        self.store.delete(&resources_key(name)).await?;
        let mut settings = 0;
        for prefix in [hints_key(name, ""), policy_key(name, "")] {
            let listing = self.store.list(&prefix).await?;
            for kv in listing.kvs {
                self.store.delete(&kv.key).await?;
                settings += 1;
            }
        }
        if settings > 0 {
            tracing::info!(server = %name, settings, "removed the server's hint overrides and tool policies");
        }
        self.recompute_names().await
    }

    /// Upserts the configured servers as `config`-origin servers. With
    /// `prune`, `config`-origin servers the file no longer lists are removed
    /// (logged by name); without it they are kept, so a replica started with
    /// a different file never removes servers others serve. Servers added
    /// through the admin API are always left alone.
    pub async fn sync_config_servers(
        &self,
        servers: &[ServerConfig],
        prune: bool,
    ) -> Result<(), RegistryError> {
        let listing = self.store.list("servers/").await?;
        let mut stored = std::collections::HashMap::new();
        for kv in &listing.kvs {
            let Ok(rec) = serde_json::from_slice::<ServerRecord>(&kv.value) else {
                continue;
            };
            stored.insert(rec.spec.name.clone(), rec.clone());
            if rec.origin == Origin::Config && !servers.iter().any(|s| s.name == rec.spec.name) {
                if prune {
                    tracing::warn!(server = %rec.spec.name, "removing a server that an earlier version of the configuration had");
                    self.remove_server(&rec.spec.name).await?;
                } else {
                    tracing::info!(server = %rec.spec.name, "keeping a configured server this replica's file does not list (prune_config_servers is off)");
                }
            }
        }
        for s in servers {
            // Unchanged (compared opened): not written again, so nothing
            // watching the server sees a change (sealing anew would give
            // another text for the same values).
            if stored.get(&s.name).is_some_and(|r| {
                r.origin == Origin::Config && secrets::same(self.ring.as_deref(), &r.spec, s)
            }) {
                continue;
            }
            let rec = ServerRecord {
                spec: self.at_rest(s.clone()),
                origin: Origin::Config,
            };
            self.store
                .put(&server_key(&s.name), encode(&rec), None)
                .await?;
        }
        Ok(())
    }

    /// Registers a sidecar under a new lease of `ttl`; returns the lease.
    pub async fn register_sidecar(
        &self,
        rec: SidecarRecord,
        ttl: Duration,
    ) -> Result<LeaseId, RegistryError> {
        if self.store.get(&server_key(&rec.server)).await?.is_none() {
            return Err(RegistryError::UnknownServer(rec.server));
        }
        let lease = self.store.grant_lease(ttl).await?;
        self.store
            .put(
                &sidecar_key(&rec.server, &rec.sidecar_id),
                encode(&rec),
                Some(lease),
            )
            .await?;
        Ok(lease)
    }

    /// Updates a registration's reported state (same lease).
    pub async fn update_sidecar(
        &self,
        rec: &SidecarRecord,
        lease: LeaseId,
    ) -> Result<(), RegistryError> {
        self.store
            .put(
                &sidecar_key(&rec.server, &rec.sidecar_id),
                encode(rec),
                Some(lease),
            )
            .await?;
        Ok(())
    }

    /// Keeps a registration's lease alive.
    pub async fn keep_alive(&self, lease: LeaseId) -> Result<(), RegistryError> {
        Ok(self.store.keep_alive(lease).await?)
    }

    /// Drops a registration now (its stream ended).
    pub async fn revoke(&self, lease: LeaseId) -> Result<(), RegistryError> {
        Ok(self.store.revoke(lease).await?)
    }

    /// Stores a catalogue snapshot. `toolsUpdatedAt` changes only when the
    /// tool list or the capabilities really changed (compared as JSON
    /// values). Returns whether they changed.
    pub async fn update_catalogue(
        &self,
        server: &str,
        tools: Vec<Value>,
        capabilities: Value,
        server_info: Value,
        protocol_version: String,
    ) -> Result<bool, RegistryError> {
        let key = tools_key(server);
        let (tools, capabilities, server_info, protocol_version) =
            (&tools, &capabilities, &server_info, &protocol_version);
        let updated = cas::update(&self.store, &key, |old| async move {
            if self.store.get(&server_key(server)).await?.is_none() {
                return Err(RegistryError::UnknownServer(server.to_owned()));
            }
            let old_rec =
                old.and_then(|kv| serde_json::from_slice::<CatalogueRecord>(&kv.value).ok());
            let changed = old_rec
                .as_ref()
                .is_none_or(|o| o.tools != *tools || o.capabilities != *capabilities);
            let rec = CatalogueRecord {
                tools: tools.clone(),
                capabilities: capabilities.clone(),
                server_info: server_info.clone(),
                protocol_version: protocol_version.clone(),
                tools_updated_at: match (&old_rec, changed) {
                    (Some(o), false) => o.tools_updated_at,
                    (Some(o), true) => now_ms().max(o.tools_updated_at + 1),
                    (None, _) => now_ms(),
                },
            };
            if old_rec.as_ref() == Some(&rec) {
                return Ok(Decision::Keep(false));
            }
            Ok(Decision::Write(Write::put(encode(&rec)), changed))
        })
        .await
        .map_err(|e| e.into_error(|| RegistryError::Contention(key.clone())))?;
        let changed = updated.value;
        if changed {
            self.recompute_names().await?;
        }
        Ok(changed)
    }

    /// Stores a server's stage E lists (resources, templates, prompts,
    /// cut to fit a record: [`ResourceCatalogueRecord::fit`]).
    /// `resourcesUpdatedAt` changes only when the resources or templates
    /// really changed, `promptsUpdatedAt` only when the prompts did
    /// (compared as JSON values). Returns which changed: (resources,
    /// prompts). Errors: an unknown server, the store.
    pub async fn update_resource_catalogue(
        &self,
        server: &str,
        lists: [Vec<Value>; 3],
    ) -> Result<(bool, bool), RegistryError> {
        let key = resources_key(server);
        let ([resources, templates, prompts], omitted) = ResourceCatalogueRecord::fit(lists);
        if omitted != [0, 0, 0] {
            tracing::warn!(
                %server,
                resources = omitted[0],
                templates = omitted[1],
                prompts = omitted[2],
                "entries left out of the stored lists: an entry over 64 KiB, or over 1 MB of entries in all"
            );
        }
        let (resources, templates, prompts) = (&resources, &templates, &prompts);
        let updated = cas::update(&self.store, &key, |old| async move {
            if self.store.get(&server_key(server)).await?.is_none() {
                return Err(RegistryError::UnknownServer(server.to_owned()));
            }
            let old = old
                .and_then(|kv| serde_json::from_slice::<ResourceCatalogueRecord>(&kv.value).ok());
            let stamp = |changed: bool, before: Option<i64>| match (before, changed) {
                (Some(t), false) => t,
                (Some(t), true) => now_ms().max(t + 1),
                (None, _) => now_ms(),
            };
            let resources_changed = old
                .as_ref()
                .is_none_or(|o| o.resources != *resources || o.resource_templates != *templates);
            let prompts_changed = old.as_ref().is_none_or(|o| o.prompts != *prompts);
            let rec = ResourceCatalogueRecord {
                resources: resources.clone(),
                resource_templates: templates.clone(),
                prompts: prompts.clone(),
                omitted,
                resources_updated_at: stamp(
                    resources_changed,
                    old.as_ref().map(|o| o.resources_updated_at),
                ),
                prompts_updated_at: stamp(
                    prompts_changed,
                    old.as_ref().map(|o| o.prompts_updated_at),
                ),
            };
            if old.as_ref() == Some(&rec) {
                return Ok(Decision::Keep((false, false)));
            }
            Ok(Decision::Write(
                Write::put(encode(&rec)),
                (resources_changed, prompts_changed),
            ))
        })
        .await
        .map_err(|e| e.into_error(|| RegistryError::Contention(key.clone())))?;
        Ok(updated.value)
    }

    /// Rebuilds the engine-visible name map from every catalogue and stores
    /// it, unless another writer stored a newer one meanwhile.
    pub async fn recompute_names(&self) -> Result<Revision, RegistryError> {
        let updated = cas::update(&self.store, TOOLNAMES_KEY, |current| async move {
            let listing = self.store.list("tools/").await?;
            let mut pairs = Vec::new();
            for kv in &listing.kvs {
                let server = kv.key.trim_start_matches("tools/").to_owned();
                let Ok(rec) = serde_json::from_slice::<CatalogueRecord>(&kv.value) else {
                    tracing::warn!(key = %kv.key, "ignoring a catalogue that does not parse");
                    continue;
                };
                for t in &rec.tools {
                    if let Some(name) = t.get("name").and_then(Value::as_str) {
                        pairs.push((server.clone(), name.to_owned()));
                    }
                }
            }
            let map = NameMap::build(pairs.iter().map(|(s, t)| (s.as_str(), t.as_str())));
            for c in &map.collisions {
                tracing::warn!(collision = %c, "engine-visible tool name collision");
            }
            let rec = NamesRecord { map };
            let value = encode(&rec);
            if current.is_some_and(|kv| kv.value == value) {
                return Ok(Decision::Keep(listing.revision));
            }
            // The listing must still be current: no catalogue written since.
            let listed = listing
                .kvs
                .iter()
                .map(|kv| Compare::mod_revision(&kv.key, kv.mod_revision));
            Ok::<_, RegistryError>(Decision::Write(
                Write::put(value).when(listed),
                listing.revision,
            ))
        })
        .await
        .map_err(|e| e.into_error(|| RegistryError::Contention(TOOLNAMES_KEY.into())))?;
        // Unchanged: the revision of the listing the map was derived from.
        Ok(if updated.written {
            updated.revision
        } else {
            updated.value
        })
    }

    /// Merges `set` into a tool's hint overrides (fields `set` leaves
    /// unset keep their override). Returns the merged record and the
    /// revision. Errors: unknown server.
    pub async fn set_tool_hints(
        &self,
        server: &str,
        tool: &str,
        set: &HintOverrideRecord,
    ) -> Result<(HintOverrideRecord, Revision), RegistryError> {
        self.check_tool_key(server, tool).await?;
        let key = hints_key(server, tool);
        let updated = cas::update(&self.store, &key, |old| async move {
            let mut rec = old
                .and_then(|kv| serde_json::from_slice::<HintOverrideRecord>(&kv.value).ok())
                .unwrap_or_default();
            rec.read_only_hint = set.read_only_hint.or(rec.read_only_hint);
            rec.destructive_hint = set.destructive_hint.or(rec.destructive_hint);
            rec.idempotent_hint = set.idempotent_hint.or(rec.idempotent_hint);
            rec.updated_at_ms = now_ms();
            Ok::<_, RegistryError>(Decision::Write(Write::put(encode(&rec)), rec))
        })
        .await
        .map_err(|e| e.into_error(|| RegistryError::Contention(key.clone())))?;
        Ok((updated.value, updated.revision))
    }

    /// Clears some of a tool's hint overrides (`read_only`, `destructive`,
    /// `idempotent`: which to clear); the record goes when none is left.
    /// Errors: unknown server.
    pub async fn clear_tool_hints(
        &self,
        server: &str,
        tool: &str,
        [read_only, destructive, idempotent]: [bool; 3],
    ) -> Result<Revision, RegistryError> {
        self.check_tool_key(server, tool).await?;
        let key = hints_key(server, tool);
        let updated = cas::update(&self.store, &key, |old| async move {
            let Some(mut rec) =
                old.and_then(|kv| serde_json::from_slice::<HintOverrideRecord>(&kv.value).ok())
            else {
                return Ok::<_, RegistryError>(Decision::Keep(()));
            };
            if read_only {
                rec.read_only_hint = None;
            }
            if destructive {
                rec.destructive_hint = None;
            }
            if idempotent {
                rec.idempotent_hint = None;
            }
            rec.updated_at_ms = now_ms();
            Ok(Decision::Write(Write::put(encode(&rec)), ()))
        })
        .await
        .map_err(|e| e.into_error(|| RegistryError::Contention(key.clone())))?;
        let left = self
            .store
            .get(&key)
            .await?
            .and_then(|kv| serde_json::from_slice::<HintOverrideRecord>(&kv.value).ok());
        if left.is_some_and(|r| r.is_empty()) {
            return self.clear_tool_setting(server, tool, &key).await;
        }
        Ok(updated.revision)
    }

    /// Sets a tool's policy and/or when its calls move to the background
    /// (stage B); a `None` keeps what is set (CAS merge). Errors: unknown
    /// server.
    pub async fn set_tool_policy(
        &self,
        server: &str,
        tool: &str,
        policy: Option<ToolPolicy>,
        background: Option<BackgroundMode>,
    ) -> Result<Revision, RegistryError> {
        self.check_tool_key(server, tool).await?;
        let key = policy_key(server, tool);
        let updated = cas::update(&self.store, &key, |old| async move {
            let mut rec = old
                .and_then(|kv| serde_json::from_slice::<PolicyRecord>(&kv.value).ok())
                .unwrap_or_default();
            rec.policy = policy.or(rec.policy);
            rec.background = background.or(rec.background);
            rec.updated_at_ms = now_ms();
            Ok::<_, RegistryError>(Decision::Write(Write::put(encode(&rec)), ()))
        })
        .await
        .map_err(|e| e.into_error(|| RegistryError::Contention(key.clone())))?;
        Ok(updated.revision)
    }

    /// Deletes a tool setting key (`hints_key` or `policy_key`); returns the
    /// revision to wait for. Errors: unknown server.
    pub async fn clear_tool_setting(
        &self,
        server: &str,
        tool: &str,
        key: &str,
    ) -> Result<Revision, RegistryError> {
        self.check_tool_key(server, tool).await?;
        let r = self
            .store
            .txn(Txn::new().and_then([Op::delete(key)]))
            .await?;
        Ok(r.revision)
    }

    async fn check_tool_key(&self, server: &str, tool: &str) -> Result<(), RegistryError> {
        if tool.is_empty() || tool.chars().any(char::is_control) {
            return Err(RegistryError::Invalid(
                "tool: required, without control characters".into(),
            ));
        }
        if self.store.get(&server_key(server)).await?.is_none() {
            return Err(RegistryError::UnknownServer(server.to_owned()));
        }
        Ok(())
    }

    /// Creates or replaces a session record.
    pub async fn put_session(&self, rec: &SessionRecord) -> Result<Revision, RegistryError> {
        Ok(self
            .store
            .put(&session_key(&rec.id), encode(rec), None)
            .await?)
    }

    /// Deletes a session. Errors: unknown session.
    pub async fn delete_session(&self, id: &str) -> Result<(), RegistryError> {
        if !self.store.delete(&session_key(id)).await? {
            return Err(RegistryError::UnknownSession(id.to_owned()));
        }
        Ok(())
    }

    /// Reads a session straight from the store (for a replica whose read
    /// model has not seen it yet).
    pub async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, RegistryError> {
        Ok(self
            .store
            .get(&session_key(id))
            .await?
            .and_then(|kv| serde_json::from_slice(&kv.value).ok()))
    }

    /// Creates or replaces an MCP endpoint session (2025-11-25).
    pub async fn put_mcp_session(
        &self,
        rec: &crate::model::mcp_session::McpSessionRecord,
    ) -> Result<Revision, RegistryError> {
        Ok(self
            .store
            .put(&crate::model::mcp_session::key(&rec.id), encode(rec), None)
            .await?)
    }

    /// Changes MCP endpoint session `id` with `change`, as a
    /// compare-and-swap of its record, so that what another replica
    /// changed meanwhile (another field) is kept. Returns the record as
    /// written and the write's revision; `None` when there is no such
    /// session (it ended). Errors: the store's, or contention.
    pub async fn update_mcp_session(
        &self,
        id: &str,
        change: impl Fn(&mut crate::model::mcp_session::McpSessionRecord) + Send + Sync,
    ) -> Result<Option<(crate::model::mcp_session::McpSessionRecord, Revision)>, RegistryError>
    {
        let key = crate::model::mcp_session::key(id);
        let change = &change;
        // A session's GET streams and its logging/setLevel requests write
        // its record at once, on this replica mostly.
        let _turn = self.mcp_session_turns.take(&key).await;
        let updated = cas::update(&self.store, &key, |old| async move {
            let current = old.and_then(|kv| {
                serde_json::from_slice::<crate::model::mcp_session::McpSessionRecord>(&kv.value)
                    .ok()
            });
            Ok::<_, RegistryError>(match current {
                None => Decision::Keep(None),
                Some(mut rec) => {
                    change(&mut rec);
                    Decision::Write(Write::put(encode(&rec)), Some(rec))
                }
            })
        })
        .await
        .map_err(|e| e.into_error(|| RegistryError::Contention(key.clone())))?;
        Ok(updated.value.map(|rec| (rec, updated.revision)))
    }

    /// Reads an MCP endpoint session straight from the store (for a
    /// replica whose read model has not seen it yet).
    pub async fn get_mcp_session(
        &self,
        id: &str,
    ) -> Result<Option<crate::model::mcp_session::McpSessionRecord>, RegistryError> {
        Ok(self
            .store
            .get(&crate::model::mcp_session::key(id))
            .await?
            .and_then(|kv| serde_json::from_slice(&kv.value).ok()))
    }

    /// Deletes an MCP endpoint session; whether it existed.
    pub async fn delete_mcp_session(&self, id: &str) -> Result<bool, RegistryError> {
        Ok(self
            .store
            .delete(&crate::model::mcp_session::key(id))
            .await?)
    }

    /// Asks every replica to cancel a call (a short-lived key they watch,
    /// `cancels/<scope>/<call id>`, under a lease of [`CANCEL_TTL`] shared
    /// by the requests of a few seconds). The keys one replica writes are
    /// bounded ([`CancelBudget`]): `principal` (the caller's name, empty
    /// for anonymous callers) may have [`CANCELS_PER_CALLER`] of them
    /// alive, and all callers [`CANCELS_PER_REPLICA`]; past that the
    /// request is refused (RESOURCE_EXHAUSTED) and nothing is written.
    /// Errors: the store, or the bound.
    pub async fn request_cancel(
        &self,
        principal: &str,
        scope: &str,
        call_id: &str,
    ) -> Result<(), RegistryError> {
        self.cancels.take(principal, std::time::Instant::now())?;
        let lease = match self.cancels.lease(std::time::Instant::now()) {
            Some(lease) => lease,
            None => {
                let lease = self.store.grant_lease(CANCEL_TTL).await?;
                self.cancels.keep_lease(lease, std::time::Instant::now());
                lease
            }
        };
        self.store
            .put(&cancel_key(scope, call_id), Vec::new(), Some(lease))
            .await?;
        Ok(())
    }

    /// The MCP endpoint's `requestState` key ring, rotated when its active
    /// key is `rotate_after` old (or created when there is none): a fresh
    /// random key becomes active, and keys older than `keep` are dropped
    /// (the newest four are kept at most). Concurrent rotations by several
    /// replicas settle on one ring (compare-and-swap). Returns the ring as
    /// stored and the revision to wait for. Errors: the store.
    pub async fn rotate_state_keys(
        &self,
        rotate_after: Duration,
        keep: Duration,
    ) -> Result<(crate::model::mrtr::StateKeyRing, Revision), RegistryError> {
        use crate::model::mrtr::{KEYS_KEY, StateKey, StateKeyRing};
        use base64::Engine as _;
        let updated = cas::update(&self.store, KEYS_KEY, |old| async move {
            let now = now_ms();
            let ring = old.and_then(|kv| serde_json::from_slice::<StateKeyRing>(&kv.value).ok());
            if let Some(r) = &ring
                && r.keys.first().is_some_and(|k| {
                    k.kid == r.active && now - k.created_at_ms < rotate_after.as_millis() as i64
                })
            {
                return Ok(Decision::Keep(r.clone()));
            }
            let mut key = [0u8; 32];
            rand::Rng::fill(&mut rand::rng(), &mut key[..]);
            let kid = switchyard_common::ids::new_id();
            let mut keys = vec![StateKey {
                kid: kid.clone(),
                key: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key),
                created_at_ms: now,
            }];
            keys.extend(
                ring.into_iter()
                    .flat_map(|r| r.keys)
                    .filter(|k| now - k.created_at_ms < keep.as_millis() as i64)
                    .take(3),
            );
            let ring = StateKeyRing { active: kid, keys };
            Ok::<_, RegistryError>(Decision::Write(Write::put(encode(&ring)), ring))
        })
        .await
        .map_err(|e| e.into_error(|| RegistryError::Contention(KEYS_KEY.to_owned())))?;
        Ok((updated.value, updated.revision))
    }

    /// Spends the `requestState` whose nonce is `digest`, once: `true`
    /// when this call spent it, `false` when it was spent before. The
    /// record lives `ttl` (the state's own lifetime, after which it opens
    /// no more anyway). Errors: the store.
    pub async fn spend_request_state(
        &self,
        digest: &str,
        ttl: Duration,
    ) -> Result<bool, RegistryError> {
        let key = crate::model::mrtr::spent_key(digest);
        let lease = self.store.grant_lease(ttl).await?;
        let r = self
            .store
            .txn(
                Txn::new()
                    .when([Compare::absent(&key)])
                    .and_then([Op::put_with_lease(&key, Vec::new(), lease)]),
            )
            .await?;
        if !r.succeeded {
            let _ = self.store.revoke(lease).await;
        }
        Ok(r.succeeded)
    }

    /// Stores how a detached MCP call ended, for `ttl`.
    pub async fn put_mcp_outcome(
        &self,
        rec: &crate::model::mrtr::OutcomeRecord,
        ttl: Duration,
    ) -> Result<Revision, RegistryError> {
        let lease = self.store.grant_lease(ttl).await?;
        Ok(self
            .store
            .put(
                &crate::model::mrtr::outcome_key(&rec.run),
                encode(rec),
                Some(lease),
            )
            .await?)
    }

    /// How the detached MCP call of run `run` ended, if it has.
    pub async fn get_mcp_outcome(
        &self,
        run: &str,
    ) -> Result<Option<crate::model::mrtr::OutcomeRecord>, RegistryError> {
        Ok(self
            .store
            .get(&crate::model::mrtr::outcome_key(run))
            .await?
            .and_then(|kv| serde_json::from_slice(&kv.value).ok()))
    }
}

#[cfg(test)]
mod tests;

/// How long a cancellation request's key lives: long enough for every
/// replica's watch to see it.
pub const CANCEL_TTL: Duration = Duration::from_secs(30);
/// Cancellation keys one caller may have alive through one replica.
pub const CANCELS_PER_CALLER: usize = 256;
/// Cancellation keys all callers may have alive through one replica.
pub const CANCELS_PER_REPLICA: usize = 4096;
/// How long one lease is shared by the cancellation keys written after it
/// was granted (each key then lives between `CANCEL_TTL - LEASE_SHARED`
/// and `CANCEL_TTL`).
const LEASE_SHARED: Duration = Duration::from_secs(10);

/// The bound on cancellation requests for calls this replica does not run
/// ([`Registry::request_cancel`]): a caller could otherwise fill the store
/// with keys by cancelling call ids that exist nowhere. Each request
/// counts for [`CANCEL_TTL`] (as long as its key may live).
#[derive(Debug, Default)]
pub struct CancelBudget {
    inner: std::sync::Mutex<BudgetState>,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// When each live request was made, per principal, oldest first.
    by_principal: std::collections::HashMap<String, std::collections::VecDeque<std::time::Instant>>,
    total: usize,
    lease: Option<(LeaseId, std::time::Instant)>,
}

impl CancelBudget {
    /// Counts one request of `principal` at `now`; RESOURCE_EXHAUSTED
    /// (as [`RegistryError::Exhausted`]) when it has [`CANCELS_PER_CALLER`]
    /// alive, or the replica [`CANCELS_PER_REPLICA`].
    pub fn take(&self, principal: &str, now: std::time::Instant) -> Result<(), RegistryError> {
        let mut st = self.inner.lock().unwrap();
        // Forget what has expired.
        let mut expired = 0;
        st.by_principal.retain(|_, times| {
            while times
                .front()
                .is_some_and(|t| now.saturating_duration_since(*t) >= CANCEL_TTL)
            {
                times.pop_front();
                expired += 1;
            }
            !times.is_empty()
        });
        st.total -= expired;
        let mine = st.by_principal.get(principal).map_or(0, |t| t.len());
        if mine >= CANCELS_PER_CALLER || st.total >= CANCELS_PER_REPLICA {
            return Err(RegistryError::Exhausted(format!(
                "too many cancellations of calls that are not running on this replica: at most {CANCELS_PER_CALLER} per caller and {CANCELS_PER_REPLICA} in all within {} s; try again later",
                CANCEL_TTL.as_secs()
            )));
        }
        st.by_principal
            .entry(principal.to_owned())
            .or_default()
            .push_back(now);
        st.total += 1;
        Ok(())
    }

    /// The lease to put a key under, if one granted recently can be shared.
    fn lease(&self, now: std::time::Instant) -> Option<LeaseId> {
        let st = self.inner.lock().unwrap();
        st.lease
            .filter(|(_, at)| now.saturating_duration_since(*at) < LEASE_SHARED)
            .map(|(lease, _)| lease)
    }

    fn keep_lease(&self, lease: LeaseId, granted: std::time::Instant) {
        self.inner.lock().unwrap().lease = Some((lease, granted));
    }
}

#[cfg(test)]
mod cancel_budget_tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn each_caller_and_the_replica_have_a_bounded_number_of_live_cancellations() {
        let budget = CancelBudget::default();
        let t0 = Instant::now();
        for _ in 0..CANCELS_PER_CALLER {
            budget.take("engine-a", t0).unwrap();
        }
        let e = budget.take("engine-a", t0).unwrap_err();
        assert!(matches!(e, RegistryError::Exhausted(_)));
        assert!(e.to_string().contains("at most 256 per caller"), "{e}");
        // Another caller is not held back by the first.
        budget.take("engine-b", t0).unwrap();
        // Once the keys have expired, the caller may cancel again.
        budget.take("engine-a", t0 + CANCEL_TTL).unwrap();
        // The replica's bound holds across callers.
        let budget = CancelBudget::default();
        for i in 0..CANCELS_PER_REPLICA {
            budget.take(&format!("c{}", i % 64), t0).unwrap();
        }
        assert!(budget.take("someone-else", t0).is_err());
        assert!(budget.take("someone-else", t0 + CANCEL_TTL).is_ok());
    }
}
