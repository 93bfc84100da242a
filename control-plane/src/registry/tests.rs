use super::*;
use crate::metrics::Metrics;
use crate::model::{HintOverrideRecord, ToolPolicy};
use crate::store::{EmbeddedConfig, StoreConfig};

async fn registry(dir: &std::path::Path) -> Registry {
    let store = AnyStore::open(StoreConfig::Embedded(EmbeddedConfig::new(
        dir.join("s.redb"),
    )))
    .await
    .unwrap();
    Registry::new(Metered::new(store, Metrics::new()))
}

fn spec(name: &str) -> ServerConfig {
    toml::from_str(&format!(
        "name = \"{name}\"\ntransport = \"stdio\"\ncommand = \"srv\"\n"
    ))
    .unwrap()
}

/// The keys under `prefix`.
async fn keys(r: &Registry, prefix: &str) -> Vec<String> {
    r.store()
        .list(prefix)
        .await
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| kv.key)
        .collect()
}

#[tokio::test]
async fn removing_a_server_removes_its_overrides_and_policies_only() {
    let dir = tempfile::tempdir().unwrap();
    let r = registry(dir.path()).await;
    // `files2` starts with `files`: its settings must stay.
    for name in ["files", "files2"] {
        r.add_server(spec(name), Origin::Admin).await.unwrap();
        let ro = HintOverrideRecord {
            read_only_hint: Some(true),
            ..Default::default()
        };
        r.set_tool_hints(name, "read", &ro).await.unwrap();
        r.set_tool_policy(name, "write", Some(ToolPolicy::Confirm), None)
            .await
            .unwrap();
    }
    assert_eq!(
        keys(&r, "hints/").await,
        ["hints/files/read", "hints/files2/read"]
    );
    r.remove_server("files").await.unwrap();
    assert_eq!(keys(&r, "hints/").await, ["hints/files2/read"]);
    assert_eq!(keys(&r, "policies/").await, ["policies/files2/write"]);
    assert_eq!(keys(&r, "servers/").await, ["servers/files2"]);
    // Added again, it starts without them.
    r.add_server(spec("files"), Origin::Admin).await.unwrap();
    assert!(keys(&r, "hints/files/").await.is_empty());
    assert!(keys(&r, "policies/files/").await.is_empty());
    // Removing an unknown server is an error, and touches nothing.
    assert!(matches!(
        r.remove_server("nope").await,
        Err(RegistryError::UnknownServer(_))
    ));
    assert_eq!(keys(&r, "policies/").await, ["policies/files2/write"]);
}
