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

#[tokio::test]
async fn resource_lists_change_their_stamp_only_on_a_real_change() {
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let r = registry(dir.path()).await;
    r.add_server(spec("docs"), Origin::Admin).await.unwrap();
    let read = |r: &Registry| {
        let store = r.store().clone();
        async move {
            let kv = store.get(&resources_key("docs")).await.unwrap().unwrap();
            serde_json::from_slice::<ResourceCatalogueRecord>(&kv.value).unwrap()
        }
    };
    let lists = |n: usize| {
        [
            (0..n)
                .map(|i| json!({"uri": format!("d://{i}"), "name": "n"}))
                .collect(),
            vec![json!({"uriTemplate": "d://{id}", "name": "t"})],
            vec![json!({"name": "p"})],
        ]
    };
    assert_eq!(
        r.update_resource_catalogue("docs", lists(2)).await.unwrap(),
        (true, true)
    );
    let first = read(&r).await;
    // The same lists again: nothing changes, not even the stamps.
    assert_eq!(
        r.update_resource_catalogue("docs", lists(2)).await.unwrap(),
        (false, false)
    );
    assert_eq!(read(&r).await, first);
    // Another resource: resources move on, prompts keep their stamp.
    assert_eq!(
        r.update_resource_catalogue("docs", lists(3)).await.unwrap(),
        (true, false)
    );
    let second = read(&r).await;
    assert!(second.resources_updated_at > first.resources_updated_at);
    assert_eq!(second.prompts_updated_at, first.prompts_updated_at);
    assert_eq!(second.resources.len(), 3);
    // An unknown server; a removed server loses its lists.
    assert!(matches!(
        r.update_resource_catalogue("nope", lists(1)).await,
        Err(RegistryError::UnknownServer(_))
    ));
    r.remove_server("docs").await.unwrap();
    assert!(keys(&r, "resources/").await.is_empty());
}

#[test]
fn resource_lists_are_cut_to_fit_a_record_in_order() {
    use serde_json::json;
    let big = |i: usize| json!({"uri": format!("d://{i}"), "description": "x".repeat(10_000)});
    let resources: Vec<Value> = (0..150).map(big).collect();
    let prompts = vec![json!({"name": "p"})];
    let ([r, t, p], omitted) = ResourceCatalogueRecord::fit([resources, vec![], prompts]);
    let kept = r.len();
    assert!((90..100).contains(&kept), "{kept}");
    assert_eq!(
        r[kept - 1]["uri"],
        format!("d://{}", kept - 1),
        "kept in order"
    );
    assert_eq!(omitted, [150 - kept, 0, 0]);
    assert!(t.is_empty());
    assert_eq!(p.len(), 1, "a later list still gets what fits");
    // One entry over 64 KiB is left out alone.
    let fat = json!({"uri": "d://fat", "description": "x".repeat(70_000)});
    let ([r, _, _], omitted) = ResourceCatalogueRecord::fit([
        vec![json!({"uri": "d://a"}), fat, json!({"uri": "d://b"})],
        vec![],
        vec![],
    ]);
    assert_eq!(r.len(), 2);
    assert_eq!(omitted, [1, 0, 0]);
    let size: usize = r.iter().chain(&p).map(|v| v.to_string().len() + 1).sum();
    assert!(size <= ResourceCatalogueRecord::MAX_BYTES);
}
