//! Opening an MRTR `requestState` (`mcp::mrtr`: `codec_of`, `binding`,
//! `open_with`, `seal_with`, with the key ring of `model::mrtr`).
//!
//! Input: the first line is opened as a `requestState` under a fixed key
//! ring; the rest is `params` (a JSON object) of a `tools/call`, whose
//! `arguments.session`, `arguments.run` and `arguments.nonce`, when strings,
//! are sealed. Checked:
//!
//! - an arbitrary string never opens (and never panics);
//! - a state sealed for a request opens for it, and for its retry (with
//!   `inputResponses`, `requestState` and `_meta` added), giving back what
//!   was sealed (or `malformed` for a nonce that is not an id);
//! - it does not open for another caller, URL, method or params, with a
//!   ring that lacks its key, or with any one character changed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use std::time::Duration;
use switchyard_control_plane::auth::Caller;
use switchyard_control_plane::mcp::ingress::Message;
use switchyard_control_plane::mcp::mrtr::{Pending, binding, codec_of, open_with, seal_with};
use switchyard_control_plane::model::mcp_session::Scope;
use switchyard_control_plane::model::mrtr::{StateKey, StateKeyRing};
use switchyard_control_plane::model::principal::Role;
use switchyard_mcp::jsonrpc::Kind;

fn ring(kids: &[&str]) -> StateKeyRing {
    StateKeyRing {
        active: kids[0].to_owned(),
        keys: kids
            .iter()
            .map(|kid| StateKey {
                kid: (*kid).to_owned(),
                // base64url of 32 bytes, different per kid.
                key: format!("{}AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", &kid[..4]),
                created_at_ms: 0,
            })
            .collect(),
    }
}

fn request(method: &str, params: Map<String, Value>) -> Message {
    Message {
        kind: Kind::Request,
        id: Some(json!(1)),
        method: method.to_owned(),
        params,
        raw: Value::Null,
    }
}

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

fuzz_target!(|data: &[u8]| {
    let codec = codec_of(&ring(&["k1aa", "k2bb"])).expect("a valid ring");
    let only_k2 = codec_of(&ring(&["k2bb"])).expect("a valid ring");
    let (first, rest) = match data.iter().position(|b| *b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &data[..0]),
    };
    let caller = Caller {
        name: "alice".into(),
        role: Role::Engine,
        method: "token",
        servers: Vec::new(),
    };
    let scope = Scope::Server("files".into());

    // Anything at all: an error, never a panic.
    let state = String::from_utf8_lossy(first);
    let params = serde_json::from_slice::<Map<String, Value>>(rest).unwrap_or_default();
    let msg = request("tools/call", params.clone());
    let ad = binding(&scope, Some(&caller), &msg);
    assert!(open_with(&codec, &ad, &state).is_err(), "opened {state:?}");
    assert!(open_with(&codec, b"", &state).is_err());

    // Seal, then open.
    let args = params.get("arguments");
    let pending = Pending {
        s: text(args.and_then(|a| a.get("session"))).unwrap_or_else(|| "s1".into()),
        r: text(args.and_then(|a| a.get("run"))).unwrap_or_else(|| "r1".into()),
        n: text(args.and_then(|a| a.get("nonce"))).unwrap_or_else(|| "n1".into()),
    };
    let sealed =
        seal_with(&codec, &pending, &ad, Duration::from_secs(60)).expect("a Pending seals");
    let nonce_ok = switchyard_control_plane::model::check_id("n", &pending.n).is_ok();
    let want = if nonce_ok {
        Ok(pending.clone())
    } else {
        Err("malformed")
    };
    assert_eq!(open_with(&codec, &ad, &sealed), want);

    let mut retry = params.clone();
    retry.insert("inputResponses".into(), json!({"q": {"action": "accept"}}));
    retry.insert("requestState".into(), Value::String(sealed.clone()));
    retry.insert("_meta".into(), json!({"progressToken": 7}));
    let retry_ad = binding(&scope, Some(&caller), &request("tools/call", retry));
    assert_eq!(open_with(&codec, &retry_ad, &sealed), want);

    // Bound to the caller, the URL, the method and the params.
    let mut other_params = params.clone();
    let extra = if params.get("extra") == Some(&json!(1)) {
        2
    } else {
        1
    };
    other_params.insert("extra".into(), json!(extra));
    let others = [
        binding(&scope, None, &msg),
        binding(&Scope::All, Some(&caller), &msg),
        binding(
            &scope,
            Some(&caller),
            &request("prompts/get", params.clone()),
        ),
        binding(&scope, Some(&caller), &request("tools/call", other_params)),
    ];
    for other in &others {
        assert_ne!(other, &ad);
        assert_eq!(open_with(&codec, other, &sealed), Err("integrity"));
    }
    assert_eq!(open_with(&only_k2, &ad, &sealed), Err("unknown_key"));

    // Any one character changed.
    let at = first.first().map_or(0, |b| usize::from(*b)) % sealed.len();
    let mut bytes = sealed.clone().into_bytes();
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).expect("ASCII");
    assert!(
        open_with(&codec, &ad, &tampered).is_err(),
        "{tampered:?} opened (changed at {at})"
    );
});
