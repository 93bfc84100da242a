use super::*;

#[test]
fn plain_names_are_sanitised() {
    let m = NameMap::build([("orders", "get_order"), ("web", "fetch.page v2")]);
    assert_eq!(m.name_of("orders", "get_order"), Some("orders__get_order"));
    assert_eq!(
        m.name_of("web", "fetch.page v2"),
        Some("web__fetch_page_v2")
    );
    assert!(m.collisions.is_empty());
    for name in m.names.keys() {
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        );
    }
}

#[test]
fn long_names_get_a_stable_hash_suffix() {
    let tool = "a".repeat(100);
    let m1 = NameMap::build([("srv", tool.as_str())]);
    let name = m1.name_of("srv", &tool).unwrap().to_owned();
    assert_eq!(name.len(), MAX_NAME);
    assert!(name.starts_with("srv__aaaa"));
    // Stable across builds and unaffected by other tools.
    let m2 = NameMap::build([("other", "x"), ("srv", tool.as_str())]);
    assert_eq!(m2.name_of("srv", &tool), Some(name.as_str()));
    // Two long names sharing a prefix stay distinct.
    let tool2 = format!("{}b", "a".repeat(99));
    let m3 = NameMap::build([("srv", tool.as_str()), ("srv", tool2.as_str())]);
    assert_ne!(m3.name_of("srv", &tool), m3.name_of("srv", &tool2));
}

#[test]
fn collisions_are_reported_and_resolved_independent_of_order() {
    let a = NameMap::build([("s", "a.b"), ("s", "a_b"), ("x", "y__z"), ("x__y", "z")]);
    let b = NameMap::build([("x__y", "z"), ("s", "a_b"), ("x", "y__z"), ("s", "a.b")]);
    assert_eq!(a, b);
    assert_eq!(a.collisions.len(), 2, "{:?}", a.collisions);
    // Every tool still has exactly one, distinct, name: one-to-one.
    assert_eq!(a.names.len(), 4);
    assert!(a.name_of("s", "a.b").unwrap().starts_with("s__a_b_"));
    assert_ne!(a.name_of("s", "a.b"), a.name_of("s", "a_b"));
    assert_eq!(a.collisions_of("x__y").len(), 1);
    assert!(a.collisions_of("orders").is_empty());
}

#[test]
fn names_never_need_splitting() {
    // A server name containing the separator maps back through the map.
    let m = NameMap::build([("team__a", "run")]);
    let r = &m.names["team__a__run"];
    assert_eq!((r.server.as_str(), r.tool.as_str()), ("team__a", "run"));
}
