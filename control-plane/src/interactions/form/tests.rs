use super::*;
use serde_json::json;

/// A form of the given properties and required names.
fn form(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

/// The problems of answering `value` to an optional one-field form whose
/// field `f` has schema `field` (empty: valid, and forwarded unchanged).
fn problems(field: &Value, value: &Value) -> Vec<String> {
    let schema = form(json!({ "f": field }), &[]);
    let content = json!({ "f": value });
    match validate_answer(&schema, &content) {
        Ok(forwarded) => {
            assert_eq!(forwarded, content);
            Vec::new()
        }
        Err(errors) => errors
            .0
            .into_iter()
            .map(|e| {
                assert_eq!(e.field, "f", "{e}");
                e.problem
            })
            .collect(),
    }
}

/// Checks each `(value, expected)`: `""` means valid, otherwise a fragment
/// that the joined problems must contain. Reports every mismatch at once.
fn table(field: Value, cases: &[(Value, &str)]) {
    let mut failures = Vec::new();
    for (value, expected) in cases {
        let got = problems(&field, value).join("; ");
        let ok = if expected.is_empty() {
            got.is_empty()
        } else {
            got.contains(expected)
        };
        if !ok {
            failures.push(format!(
                "{value}: expected {:?}, got {got:?}",
                if expected.is_empty() {
                    "valid"
                } else {
                    expected
                }
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "schema {field}:\n{}",
        failures.join("\n")
    );
}

/// Checks a string `format`: every `valid` passes, every `invalid` fails
/// with a message containing `message`.
fn format_table(format: &str, message: &str, valid: &[&str], invalid: &[&str]) {
    let mut cases: Vec<(Value, &str)> = valid.iter().map(|s| (json!(s), "")).collect();
    cases.extend(invalid.iter().map(|s| (json!(s), message)));
    table(json!({"type": "string", "format": format}), &cases);
}

fn errors_of(schema: &Value, content: &Value) -> Vec<FormError> {
    validate_answer(schema, content)
        .expect_err("should be rejected")
        .0
}

fn fields_of(errors: &[FormError]) -> Vec<&str> {
    errors.iter().map(|e| e.field.as_str()).collect()
}

// --- Errors and their display ------------------------------------------------

#[test]
fn display_lists_every_problem_with_field_and_rule() {
    let schema = form(
        json!({
            "email": {"type": "string", "format": "email"},
            "age": {"type": "integer", "maximum": 150}
        }),
        &["email"],
    );
    let err = validate_answer(&schema, &json!({"email": "not-an-email", "age": 200})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "email: \"not-an-email\" is not a valid email address; age: 200 is above the maximum 150"
    );
    assert_eq!(err.0.len(), 2);
    assert_eq!(err.for_field("age").count(), 1);
    assert_eq!((&err).into_iter().count(), err.iter().count());
    // One field can break several rules; each is its own error.
    let schema = form(
        json!({"email": {"type": "string", "format": "email", "maxLength": 5}}),
        &[],
    );
    let err = validate_answer(&schema, &json!({"email": "not-an-email"})).unwrap_err();
    assert_eq!(
        err.to_string(),
        "email: \"not-an-email\" is 12 characters long, above the maximum length 5 (maxLength); \
         email: \"not-an-email\" is not a valid email address"
    );
}

#[test]
fn errors_serialize_as_a_list_of_field_and_problem() {
    let err = FormErrors(vec![error("a", "is required but missing".to_owned())]);
    let json = serde_json::to_value(&err).unwrap();
    assert_eq!(
        json,
        json!([{"field": "a", "problem": "is required but missing"}])
    );
    assert_eq!(serde_json::from_value::<FormErrors>(json).unwrap(), err);
}

#[test]
fn long_values_are_shortened_in_messages() {
    let long = "x".repeat(500);
    let got = problems(&json!({"type": "string", "maxLength": 10}), &json!(long)).join("");
    assert!(got.contains("500 characters long"), "{got}");
    assert!(got.contains('…'), "{got}");
    assert!(got.len() < 200, "{got}");
}

// --- The spec's own examples -------------------------------------------------

#[test]
fn spec_examples_are_accepted() {
    // Elicitation, "Example: Simple Text Request" and "Structured Data Request".
    let simple = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"]
    });
    assert_eq!(
        validate_answer(&simple, &json!({"name": "octocat"})).unwrap(),
        json!({"name": "octocat"})
    );
    let structured = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Your full name"},
            "email": {"type": "string", "format": "email", "description": "Your email address"},
            "age": {"type": "number", "minimum": 18, "description": "Your age"}
        },
        "required": ["name", "email"]
    });
    let answer = json!({"name": "Monalisa Octocat", "email": "octocat@github.com", "age": 30});
    assert_eq!(validate_answer(&structured, &answer).unwrap(), answer);
    // Optional "age" left out.
    let partial = json!({"name": "Monalisa Octocat", "email": "octocat@github.com"});
    assert_eq!(validate_answer(&structured, &partial).unwrap(), partial);
    // No "required" at all, nothing answered.
    let none = json!({"type": "object", "properties": {"x": {"type": "boolean"}}});
    assert_eq!(validate_answer(&none, &json!({})).unwrap(), json!({}));
}

// --- Strings -------------------------------------------------------------------

#[test]
fn string_lengths_count_unicode_scalar_values() {
    table(
        json!({"type": "string", "minLength": 2, "maxLength": 3}),
        &[
            (json!("ab"), ""),
            (json!("abc"), ""),
            (
                json!(""),
                "0 characters long, below the minimum length 2 (minLength)",
            ),
            (
                json!("a"),
                "1 characters long, below the minimum length 2 (minLength)",
            ),
            (
                json!("abcd"),
                "4 characters long, above the maximum length 3 (maxLength)",
            ),
            // 6 bytes, 2 scalars.
            (json!("日本"), ""),
            // 12 bytes, 3 scalars.
            (json!("👍👍👍"), ""),
            // Precomposed é is one scalar value: too short.
            (json!("é"), "below the minimum length 2"),
            // e + combining acute is two scalar values (one grapheme).
            (json!("e\u{301}"), ""),
            // Thumbs up + skin tone: two scalar values.
            (json!("👍🏽"), ""),
            // Family: man ZWJ woman ZWJ girl is five scalar values.
            (
                json!("👨\u{200d}👩\u{200d}👧"),
                "5 characters long, above the maximum length 3",
            ),
        ],
    );
    // Integral floats are accepted as lengths.
    table(
        json!({"type": "string", "maxLength": 2.0}),
        &[(json!("ab"), ""), (json!("abc"), "maxLength")],
    );
}

#[test]
fn strings_reject_other_json_types() {
    table(
        json!({"type": "string"}),
        &[
            (json!("text"), ""),
            (json!(""), ""),
            (json!(42), "expected a string, got a number 42"),
            (json!(true), "expected a string, got a boolean true"),
            (json!(["a"]), "expected a string, got an array [\"a\"]"),
            (json!({"a": 1}), "expected a string, got an object"),
        ],
    );
}

#[test]
fn email_format() {
    format_table(
        "email",
        "is not a valid email address",
        &[
            "octocat@github.com",
            "a.b+tag@sub.example.co.uk",
            "user@localhost",
            "x@example.com",
            "first_last-1@ex-ample.com",
            "o'brien@example.ie",
            "!#$%&'*+-/=?^_`{|}~@example.com",
            "\"john doe\"@example.com",
            "\"a@b\"@example.com",
            "\"quote\\\"d\"@example.com",
            "user@[192.168.0.1]",
            "user@[IPv6:2001:db8::1]",
            "user@[ipv6:::1]",
            "user@123.example",
        ],
        &[
            "not-an-email",
            "",
            "@example.com",
            "user@",
            "user@@example.com",
            "a@b@example.com",
            "a..b@example.com",
            ".a@example.com",
            "a.@example.com",
            "us er@example.com",
            "user@exa mple.com",
            "user@-example.com",
            "user@example-.com",
            "user@exa_mple.com",
            "user@example..com",
            "user@example.com.",
            "user@.example.com",
            "josé@example.com",
            "user@exämple.com",
            "\"unterminated@example.com",
            "\"bad\"quote\"@example.com",
            "user@[300.1.1.1]",
            "user@[2001:db8::1]",
            "user@[IPv6:not-an-ip]",
            "user@[abc€]",
            "user@[IPv€:1]",
            "user@example.com>",
            "<user@example.com>",
            "Name <user@example.com>",
            // 65-octet local part, 64-octet label.
            &format!("{}@example.com", "a".repeat(65)),
            &format!("user@{}.com", "a".repeat(64)),
        ],
    );
    // The limits themselves are fine.
    format_table(
        "email",
        "",
        &[
            &format!("{}@example.com", "a".repeat(64)),
            &format!("user@{}.com", "a".repeat(63)),
        ],
        &[],
    );
}

#[test]
fn uri_format() {
    format_table(
        "uri",
        "is not a valid URI",
        &[
            "https://example.com",
            "https://example.com/",
            "https://example.com/path/to?q=1&r=a%20b#frag/ment?x",
            "http://user:pass@example.com:8080/a;b=c",
            "http://[::1]:8080/",
            "http://[2001:db8::7]/c=GB?objectClass?one",
            "http://[v1.fe80::a+en1]/",
            "http://192.168.0.1/",
            "http://example.com:/",
            "file:///etc/hosts",
            "mailto:octocat@github.com",
            "urn:isbn:0451450523",
            "urn:oasis:names:specification:docbook:dtd:xml:4.1.2",
            "tel:+1-816-555-1212",
            "news:comp.infosystems.www.servers.unix",
            "ldap://[2001:db8::7]/c=GB?objectClass?one",
            "data:text/plain;charset=utf-8,hello",
            "a+b.c-d:x",
            "HTTPS://EXAMPLE.COM/%7Euser",
        ],
        &[
            "",
            "example.com",
            "www.example.com/path",
            "/relative/path",
            "//example.com/path",
            "?q=1",
            "1http://example.com",
            "ht tp://example.com",
            ":no-scheme",
            "https://exa mple.com",
            "https://example.com/a b",
            "https://example.com/%zz",
            "https://example.com/%2",
            "https://example.com/%",
            "https://例え.jp/",
            "https://example.com/ü",
            "http://host:port/",
            "http://[::1/",
            "http://[::1]x/",
            "http://[not-ipv6]/",
            "http://a#b#c",
            "http://exa<mple>.com/",
            "http://example.com/\"quoted\"",
            "http://example.com/{x}",
            "http://user@name@example.com/",
        ],
    );
}

#[test]
fn date_format() {
    format_table(
        "date",
        "is not a valid date (RFC 3339 full-date, YYYY-MM-DD)",
        &[
            "2025-01-31",
            "2024-02-29", // divisible by 4
            "2000-02-29", // divisible by 400
            "1900-02-28",
            "2023-12-31",
            "2023-04-30",
            "0000-01-01",
            "9999-12-31",
        ],
        &[
            "2023-02-29", // not a leap year
            "1900-02-29", // divisible by 100, not by 400
            "2100-02-29",
            "2024-02-30",
            "2024-04-31",
            "2024-06-31",
            "2024-09-31",
            "2024-11-31",
            "2024-01-32",
            "2024-00-10",
            "2024-13-01",
            "2024-01-00",
            "2024-1-01",
            "2024-01-1",
            "24-01-01",
            "20240101",
            "2024/01/01",
            "2024-01-01T00:00:00Z",
            "2024-01-01 ",
            " 2024-01-01",
            "２０２４-01-01",
            "+2024-01-01",
            "2024-W01-1",
            "",
        ],
    );
}

#[test]
fn date_time_format() {
    format_table(
        "date-time",
        "is not a valid date-time (RFC 3339",
        &[
            "2025-01-31T09:30:00Z",
            "2025-01-31t09:30:00z",
            "2024-02-29T23:59:59+00:00",
            "2024-02-29T00:00:00-00:00",
            "2025-01-31T09:30:00+05:30",
            "2025-01-31T09:30:00-08:00",
            "2025-01-31T09:30:00+23:59",
            "2025-01-31T09:30:00.5Z",
            "2025-01-31T09:30:00.123456789+01:00",
            "1985-04-12T23:20:50.52Z",
            "1996-12-19T16:39:57-08:00",
            // Leap seconds, only ever 23:59:60 UTC.
            "1990-12-31T23:59:60Z",
            "1990-12-31T15:59:60-08:00",
            "1998-12-31T23:59:60.5Z",
            "1999-01-01T00:59:60+01:00",
        ],
        &[
            "2025-01-31",
            "2025-01-31T09:30Z",    // seconds are required
            "2025-01-31T09:30:00",  // the offset is required
            "2025-01-31 09:30:00Z", // RFC 3339's ABNF has "T"
            "2025-01-31T9:30:00Z",
            "2025-01-31T24:00:00Z",
            "2025-01-31T09:60:00Z",
            "2025-01-31T09:30:61Z",
            "2025-01-31T09:30:60Z",      // not a leap second instant
            "1990-12-31T23:59:60+01:00", // 22:59:60 UTC
            "2025-01-31T09:30:00.Z",     // fraction needs digits
            "2025-01-31T09:30:00,5Z",
            "2025-01-31T09:30:00+0530",
            "2025-01-31T09:30:00+05",
            "2025-01-31T09:30:00+24:00",
            "2025-01-31T09:30:00+05:60",
            "2025-01-31T09:30:00ZZ",
            "2025-01-31T09:30:00Z ",
            "2025-01-31T09:30:00UTC",
            "2023-02-29T09:30:00Z", // the date part is checked too
            "2025-13-01T09:30:00Z",
            "2025-01-31X09:30:00Z",
            "",
        ],
    );
}

#[test]
fn format_checks_never_panic_on_odd_text() {
    let seeds = [
        "octocat@github.com",
        "\"a b\"@[IPv6:::1]",
        "http://u:p@[::1]:80/p?q#f",
        "http://[v1.x]/",
        "2024-02-29",
        "1990-12-31T15:59:60.123-08:00",
    ];
    let odd = ["€", "👍", "%", "@", "[", "]", ":", ".", "\"", "\\", "\u{0}"];
    for seed in seeds {
        let boundaries: Vec<usize> = seed
            .char_indices()
            .map(|(i, _)| i)
            .chain([seed.len()])
            .collect();
        for &at in &boundaries {
            let mut texts = vec![seed[..at].to_owned(), seed[at..].to_owned()];
            for o in odd {
                texts.push(format!("{}{o}{}", &seed[..at], &seed[at..]));
                texts.push(format!("{}{o}", &seed[..at]));
            }
            for text in texts {
                // Only that it returns; the verdict does not matter here.
                let _ = (
                    is_email(&text),
                    is_uri(&text),
                    is_date(&text),
                    is_date_time(&text),
                );
            }
        }
    }
}

#[test]
fn unknown_formats_are_not_checked_but_types_are() {
    for format in ["hostname", "uuid", "color", "password"] {
        table(
            json!({"type": "string", "format": format}),
            &[
                (json!("anything at all"), ""),
                (json!(7), "expected a string"),
            ],
        );
    }
}

// --- Numbers and booleans ---------------------------------------------------------

#[test]
fn numbers_with_inclusive_limits() {
    table(
        json!({"type": "number", "minimum": 0, "maximum": 100}),
        &[
            (json!(0), ""),
            (json!(100), ""),
            (json!(50.5), ""),
            (json!(0.0), ""),
            (json!(100.0), ""),
            (json!(1e2), ""),
            (json!(-1), "-1 is below the minimum 0"),
            (json!(-0.001), "-0.001 is below the minimum 0"),
            (json!(100.0001), "100.0001 is above the maximum 100"),
            (json!(101), "101 is above the maximum 100"),
            (json!(u64::MAX), "is above the maximum 100"),
            (json!(i64::MIN), "is below the minimum 0"),
            (json!("42"), "expected a number, got a string \"42\""),
            (json!(true), "expected a number, got a boolean"),
            (json!([1]), "expected a number, got an array"),
        ],
    );
    table(
        json!({"type": "number", "minimum": -1.5, "maximum": 1.5}),
        &[
            (json!(-1.5), ""),
            (json!(1), ""),
            (json!(-2), "-2 is below the minimum -1.5"),
            (json!(2), "2 is above the maximum 1.5"),
        ],
    );
    // Exact integer comparison at the edges of f64 precision.
    table(
        json!({"type": "integer", "maximum": 9007199254740993_u64}),
        &[
            (json!(9007199254740993_u64), ""),
            (
                json!(9007199254740994_u64),
                "is above the maximum 9007199254740993",
            ),
        ],
    );
}

#[test]
fn integers_must_be_integral() {
    table(
        json!({"type": "integer", "minimum": 1, "maximum": 10}),
        &[
            (json!(1), ""),
            (json!(10), ""),
            (json!(3.0), ""),
            (json!(5e0), ""),
            (json!(3.5), "3.5 is not an integer"),
            (json!(0.5), "0.5 is not an integer"),
            (json!(0), "0 is below the minimum 1"),
            (json!(11), "11 is above the maximum 10"),
            (json!("5"), "expected an integer, got a string \"5\""),
            (json!(false), "expected an integer, got a boolean"),
        ],
    );
    table(
        json!({"type": "integer"}),
        &[
            (json!(-7), ""),
            (json!(u64::MAX), ""),
            (json!(1e300), ""),
            (json!(-0.25), "not an integer"),
        ],
    );
    // Both rules are reported.
    assert_eq!(
        problems(&json!({"type": "integer", "maximum": 1}), &json!(2.5)),
        ["2.5 is not an integer", "2.5 is above the maximum 1"]
    );
}

#[test]
fn booleans() {
    table(
        json!({"type": "boolean", "default": false}),
        &[
            (json!(true), ""),
            (json!(false), ""),
            (json!("true"), "expected a boolean, got a string \"true\""),
            (json!(1), "expected a boolean, got a number 1"),
            (json!(0), "expected a boolean"),
            (json!([]), "expected a boolean, got an array"),
        ],
    );
}

// --- Selects ---------------------------------------------------------------------

#[test]
fn single_select_untitled_titled_and_legacy() {
    let untitled = json!({"type": "string", "enum": ["Red", "Green", "Blue"], "default": "Red"});
    let titled = json!({
        "type": "string",
        "oneOf": [
            {"const": "#FF0000", "title": "Red"},
            {"const": "#00FF00", "title": "Green"},
            {"const": "#0000FF", "title": "Blue"}
        ],
        "default": "#FF0000"
    });
    let legacy = json!({
        "type": "string",
        "enum": ["#FF0000", "#00FF00", "#0000FF"],
        "enumNames": ["Red", "Green", "Blue"]
    });
    table(
        untitled,
        &[
            (json!("Red"), ""),
            (json!("Blue"), ""),
            (
                json!("red"),
                "\"red\" is not one of the options \"Red\", \"Green\", \"Blue\"",
            ),
            (json!(""), "is not one of the options"),
            (
                json!(["Red"]),
                "expected a string (one of the options), got an array",
            ),
            (
                json!(1),
                "expected a string (one of the options), got a number",
            ),
        ],
    );
    table(
        titled,
        &[
            (json!("#00FF00"), ""),
            // The label is not the value.
            (
                json!("Green"),
                "\"Green\" is not one of the options \"#FF0000\" (Red), \"#00FF00\" (Green), \
                 \"#0000FF\" (Blue)",
            ),
        ],
    );
    table(
        legacy,
        &[
            (json!("#0000FF"), ""),
            (
                json!("Blue"),
                "\"Blue\" is not one of the options \"#FF0000\" (Red)",
            ),
        ],
    );
    // With both, "enum" decides.
    table(
        json!({"type": "string", "enum": ["a"], "oneOf": [{"const": "b", "title": "B"}]}),
        &[
            (json!("a"), ""),
            (json!("b"), "not one of the options \"a\""),
        ],
    );
}

#[test]
fn long_option_lists_are_shortened_in_messages() {
    let values: Vec<String> = (0..25).map(|i| format!("o{i}")).collect();
    let got = problems(&json!({"type": "string", "enum": values}), &json!("zz")).join("");
    assert!(got.contains("\"o9\", and 15 more"), "{got}");
    assert!(!got.contains("\"o10\""), "{got}");
    let got = problems(&json!({"type": "string", "enum": []}), &json!("zz")).join("");
    assert!(got.contains("the field has no options"), "{got}");
}

#[test]
fn multi_select_untitled_and_titled_with_limits() {
    let untitled = json!({
        "type": "array",
        "minItems": 1,
        "maxItems": 2,
        "items": {"type": "string", "enum": ["Red", "Green", "Blue"]},
        "default": ["Red", "Green"]
    });
    table(
        untitled,
        &[
            (json!(["Red"]), ""),
            (json!(["Blue", "Red"]), ""),
            (json!([]), "0 selected, below the minimum 1 (minItems)"),
            (
                json!(["Red", "Green", "Blue"]),
                "3 selected, above the maximum 2 (maxItems)",
            ),
            (json!(["Red", "Red"]), "\"Red\" is selected more than once"),
            (
                json!(["Purple"]),
                "\"Purple\" is not one of the options \"Red\"",
            ),
            (json!(["Red", 1]), "item 2 (1) is not a string"),
            (json!(["Red", null]), "item 2 (null) is not a string"),
            (
                json!("Red"),
                "expected an array of strings (the selected options), got a string",
            ),
            (json!({"Red": true}), "expected an array of strings"),
        ],
    );
    let titled = json!({
        "type": "array",
        "minItems": 1,
        "maxItems": 2,
        "items": {
            "anyOf": [
                {"const": "#FF0000", "title": "Red"},
                {"const": "#00FF00", "title": "Green"},
                {"const": "#0000FF", "title": "Blue"}
            ]
        },
        "default": ["#FF0000", "#00FF00"]
    });
    table(
        titled,
        &[
            (json!(["#FF0000", "#0000FF"]), ""),
            (
                json!(["Red"]),
                "\"Red\" is not one of the options \"#FF0000\" (Red)",
            ),
        ],
    );
    // SEP-1330's prose spelling, items.oneOf, is read the same way.
    table(
        json!({"type": "array", "items": {"oneOf": [{"const": "a", "title": "A"}]}}),
        &[
            (json!(["a"]), ""),
            (json!([]), ""),
            (json!(["b"]), "not one of the options"),
        ],
    );
    // A duplicate is reported once, however often it repeats.
    assert_eq!(
        problems(
            &json!({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}),
            &json!(["a", "a", "a", "b", "b"])
        ),
        [
            "\"a\" is selected more than once",
            "\"b\" is selected more than once"
        ]
    );
}

// --- Required, null, extra and whole-content problems ------------------------------------

#[test]
fn required_fields_must_be_present_and_defaults_are_not_filled_in() {
    let schema = form(
        json!({
            "name": {"type": "string", "default": "octocat"},
            "colour": {"type": "string", "enum": ["Red", "Green"], "default": "Green"},
            "count": {"type": "integer", "default": 3},
            "subscribe": {"type": "boolean", "default": true}
        }),
        &["name", "count"],
    );
    let errors = errors_of(&schema, &json!({}));
    assert_eq!(fields_of(&errors), ["name", "count"]);
    assert_eq!(errors[0].problem, "is required but missing");
    // Optional fields with defaults that the user left out stay out.
    let answer = json!({"name": "monalisa", "count": 1});
    assert_eq!(validate_answer(&schema, &answer).unwrap(), answer);
    // An empty string is an answer (minLength is what forbids it).
    let answer = json!({"name": "", "count": 0});
    assert_eq!(validate_answer(&schema, &answer).unwrap(), answer);
}

#[test]
fn null_values_are_rejected() {
    let schema = form(
        json!({"a": {"type": "string"}, "b": {"type": "number"}}),
        &["a"],
    );
    let errors = errors_of(&schema, &json!({"a": null, "b": null}));
    assert_eq!(
        errors,
        [
            error("a", "is required; null is not an answer".to_owned()),
            error(
                "b",
                "null is not allowed; leave the field out instead".to_owned()
            ),
        ]
    );
}

#[test]
fn extra_fields_are_rejected_by_name() {
    let schema = form(
        json!({"name": {"type": "string"}, "age": {"type": "integer"}}),
        &[],
    );
    let errors = errors_of(
        &schema,
        &json!({"name": "x", "nickname": "y", "age": 3, "admin": true}),
    );
    assert_eq!(fields_of(&errors), ["nickname", "admin"]);
    assert_eq!(
        errors[0].problem,
        "is not a field of the requested schema (its fields are name, age)"
    );
    let empty = form(json!({}), &[]);
    assert_eq!(validate_answer(&empty, &json!({})).unwrap(), json!({}));
    assert_eq!(
        errors_of(&empty, &json!({"x": 1}))[0].problem,
        "is not a field of the requested schema (it has no fields)"
    );
}

#[test]
fn content_must_be_an_object() {
    let schema = form(json!({"a": {"type": "string"}}), &[]);
    let cases = [
        (
            json!(null),
            "null content is only valid when the user declines or cancels",
        ),
        (json!("a"), "must be an object, not a string \"a\""),
        (json!([{"a": "x"}]), "must be an object, not an array"),
        (json!(1), "must be an object, not a number 1"),
    ];
    for (content, expected) in cases {
        let errors = errors_of(&schema, &content);
        assert_eq!(fields_of(&errors), [CONTENT_FIELD], "{content}");
        assert!(
            errors[0].problem.contains(expected),
            "{content}: {}",
            errors[0]
        );
    }
}

#[test]
fn every_problem_is_reported_in_schema_order_then_extras() {
    let schema = form(
        json!({
            "a": {"type": "string", "minLength": 3},
            "b": {"type": "boolean"},
            "c": {"type": "integer"},
            "d": {"type": "array", "items": {"type": "string", "enum": ["x"]}}
        }),
        &["b"],
    );
    let errors = errors_of(&schema, &json!({"z": 1, "d": ["y"], "c": 1.5, "a": "no"}));
    assert_eq!(fields_of(&errors), ["a", "b", "c", "d", "z"]);
}

// --- The schema itself ------------------------------------------------------------------

#[test]
fn malformed_top_level_schemas_are_reported() {
    let cases: &[(Value, &[&str])] = &[
        (json!(null), &["must be a JSON object"]),
        (
            json!([]),
            &["must be a JSON object with \"type\": \"object\""],
        ),
        (
            json!({"properties": {}}),
            &["\"type\" must be \"object\" (a flat object of primitive fields) but is missing"],
        ),
        (
            json!({"type": "array", "properties": {}}),
            &["\"type\" must be \"object\" (a flat object of primitive fields), not \"array\""],
        ),
        (
            json!({"type": ["object"], "properties": {}}),
            &["\"type\" must be \"object\""],
        ),
        (
            json!({"type": "object"}),
            &[
                "\"properties\" must be an object mapping field names to primitive schemas but is missing",
            ],
        ),
        (
            json!({"type": "object", "properties": []}),
            &["\"properties\" must be an object mapping field names to primitive schemas, not []"],
        ),
        (
            json!({"type": "object", "properties": {}, "required": "a"}),
            &["\"required\" must be an array of field names, not \"a\""],
        ),
        (
            json!({"type": "object", "properties": {}, "required": [1]}),
            &["\"required\" must be an array of field names"],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a", "b"]}),
            &["\"required\" lists \"b\", which is not in \"properties\""],
        ),
        // Several at once.
        (
            json!({"type": "string", "required": 3}),
            &[
                "\"type\" must be \"object\"",
                "\"properties\" must be",
                "\"required\" must be",
            ],
        ),
    ];
    for (schema, expected) in cases {
        let errors = errors_of(schema, &json!({"a": "x"}));
        assert_eq!(errors.len(), expected.len(), "{schema}: {errors:?}");
        for (error, fragment) in errors.iter().zip(expected.iter()) {
            assert_eq!(error.field, SCHEMA_FIELD);
            assert!(error.problem.contains(fragment), "{schema}: {error}");
        }
    }
}

#[test]
fn unsupported_property_shapes_cannot_be_answered() {
    let cases = [
        (
            json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            "nested objects are not supported",
        ),
        (
            json!({"type": "array", "items": {"type": "number"}}),
            "multi-select enums of strings, not of \"type\" \"number\"",
        ),
        (
            json!({"type": "array", "items": {"type": "string"}}),
            "has neither \"enum\" nor \"anyOf\"",
        ),
        (
            json!({"type": "array", "items": {"type": "object", "properties": {}}}),
            "multi-select enums of strings",
        ),
        (json!({"type": "array"}), "no \"items\" object"),
        (
            json!({"type": "array", "items": [{"type": "string"}]}),
            "no \"items\" object",
        ),
        (
            json!({"description": "no type"}),
            "the field's schema has no \"type\"",
        ),
        (
            json!({"type": ["string", "null"]}),
            "\"type\" must be one of",
        ),
        (json!({"type": "null"}), "\"type\" \"null\" is not one of"),
        (json!({"type": "date"}), "\"type\" \"date\" is not one of"),
        (
            json!("string"),
            "the field's schema is a string \"string\", not an object",
        ),
        (json!(true), "the field's schema is a boolean true"),
        (
            json!({"type": "string", "maxLength": "5"}),
            "\"maxLength\" must be a non-negative integer, not \"5\"",
        ),
        (
            json!({"type": "string", "minLength": -1}),
            "\"minLength\" must be a non-negative integer, not -1",
        ),
        (
            json!({"type": "string", "minLength": 1.5}),
            "\"minLength\" must be a non-negative integer",
        ),
        (
            json!({"type": "string", "format": 5}),
            "\"format\" must be a string, not 5",
        ),
        (
            json!({"type": "number", "minimum": "0"}),
            "\"minimum\" must be a number, not \"0\"",
        ),
        (
            json!({"type": "integer", "maximum": null}),
            "\"maximum\" must be a number, not null",
        ),
        (
            json!({"type": "string", "enum": [1, 2]}),
            "\"enum\" value 1 is not a string",
        ),
        (
            json!({"type": "string", "enum": "Red"}),
            "\"enum\" must be an array of strings",
        ),
        (
            json!({"type": "string", "oneOf": [{"title": "Red"}]}),
            "\"oneOf\" option 1 has no string \"const\"",
        ),
        (
            json!({"type": "string", "oneOf": {"const": "a"}}),
            "\"oneOf\" must be an array of {\"const\", \"title\"} options",
        ),
        (
            json!({"type": "array", "items": {"anyOf": [{"const": 1, "title": "One"}]}}),
            "\"anyOf\" option 1 has no string \"const\"",
        ),
        (
            json!({"type": "array", "items": {"enum": ["a"]}, "maxItems": "2"}),
            "\"maxItems\" must be a non-negative integer",
        ),
    ];
    for (field, why) in cases {
        // Answered: rejected, with the reason.
        let schema = form(json!({"f": field, "ok": {"type": "boolean"}}), &[]);
        let errors = errors_of(&schema, &json!({"f": "anything", "ok": "no"}));
        assert_eq!(fields_of(&errors), ["f", "ok"], "{field}");
        let problem = &errors[0].problem;
        assert!(
            problem.starts_with(
                "cannot be answered: its schema is not a supported MCP elicitation primitive ("
            ) && problem.contains(why),
            "{field}: {problem}"
        );
        // Optional and left out: the rest of the form is fine.
        assert_eq!(
            validate_answer(&schema, &json!({"ok": true})).unwrap(),
            json!({"ok": true})
        );
        // Required: the form cannot be completed.
        let schema = form(json!({"f": field}), &["f"]);
        let errors = errors_of(&schema, &json!({}));
        assert!(
            errors[0]
                .problem
                .starts_with("is required but cannot be answered: ")
                && errors[0].problem.contains(why),
            "{field}: {}",
            errors[0]
        );
        // A summary lists it as unsupported, with the same reason.
        let summary = summarize_schema(&schema);
        assert_eq!(summary[0].kind, FieldKind::Unsupported);
        assert!(summary[0].unsupported.as_deref().unwrap().contains(why));
    }
}

#[test]
fn unknown_keywords_are_kept_and_ignored() {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "urn:example:form",
        "type": "object",
        "title": "Profile",
        "x-ui": {"layout": "grid"},
        "additionalProperties": false,
        "properties": {
            "code": {"type": "string", "pattern": "^[0-9]+$", "x-hint": 1, "examples": ["123"]},
            "score": {"type": "number", "exclusiveMaximum": 10, "multipleOf": 3},
            "tags": {
                "type": "array",
                "uniqueItems": true,
                "contains": {"const": "a"},
                "items": {"type": "string", "enum": ["a", "b"], "x-extra": true}
            },
            "ok": {"type": "boolean", "readOnly": true, "const": true},
            "pick": {"type": "string", "oneOf": [{"const": "a", "title": "A", "description": "first"}]}
        },
        "required": ["code"],
        "dependentRequired": {"score": ["tags"]}
    });
    let before = schema.clone();
    // None of these keywords is enforced: the pattern, exclusiveMaximum,
    // multipleOf, contains, const and dependentRequired all "fail" here.
    let answer = json!({"code": "abc", "score": 10, "tags": ["b"], "ok": false, "pick": "a"});
    assert_eq!(validate_answer(&schema, &answer).unwrap(), answer);
    assert_eq!(schema, before);
    let kinds: Vec<FieldKind> = summarize_schema(&schema).iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        [
            FieldKind::String,
            FieldKind::Number,
            FieldKind::MultiSelect,
            FieldKind::Boolean,
            FieldKind::SingleSelect
        ]
    );
}

// --- Summaries -----------------------------------------------------------------------------

#[test]
fn summaries_describe_every_kind() {
    let schema = json!({
        "type": "object",
        "properties": {
            "email": {
                "type": "string", "title": "Email", "description": "Where we write",
                "format": "email", "minLength": 3, "maxLength": 50, "default": "user@example.com"
            },
            "age": {"type": "integer", "minimum": 18, "maximum": 150, "default": 30},
            "ratio": {"type": "number", "minimum": 0.5, "default": 0.75},
            "agree": {"type": "boolean", "default": false},
            "colour": {"type": "string", "enum": ["Red", "Green"], "default": "Green"},
            "hex": {
                "type": "string",
                "oneOf": [{"const": "#FF0000", "title": "Red"}, {"const": "#00FF00"}]
            },
            "legacy": {"type": "string", "enum": ["a", "b", "c"], "enumNames": ["A", 2]},
            "colours": {
                "type": "array", "minItems": 1, "maxItems": 2,
                "items": {"anyOf": [{"const": "r", "title": "Red"}, {"const": "g", "title": "Green"}]},
                "default": ["r"]
            },
            "plain": {"type": "array", "items": {"type": "string", "enum": ["x"]}},
            "nested": {"type": "object", "title": "Nested"}
        },
        "required": ["email", "colours"]
    });
    let fields = summarize_schema(&schema);
    let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "email", "age", "ratio", "agree", "colour", "hex", "legacy", "colours", "plain",
            "nested"
        ]
    );
    let opt = |value: &str, label: &str| SelectOption {
        value: value.to_owned(),
        label: label.to_owned(),
    };

    let email = &fields[0];
    assert_eq!(email.kind, FieldKind::String);
    assert_eq!(email.title.as_deref(), Some("Email"));
    assert_eq!(email.description.as_deref(), Some("Where we write"));
    assert!(email.required);
    assert_eq!(email.default, Some(json!("user@example.com")));
    assert_eq!(
        email.limits,
        Limits {
            min_length: Some(3),
            max_length: Some(50),
            format: Some("email".to_owned()),
            ..Limits::default()
        }
    );
    assert!(email.options.is_empty() && email.unsupported.is_none());

    let age = &fields[1];
    assert_eq!(age.kind, FieldKind::Integer);
    assert!(!age.required);
    assert_eq!(age.default, Some(json!(30)));
    assert_eq!(age.limits.minimum, Some(Number::from(18)));
    assert_eq!(age.limits.maximum, Some(Number::from(150)));
    assert_eq!(fields[2].kind, FieldKind::Number);
    assert_eq!(fields[2].limits.minimum, Number::from_f64(0.5));
    assert_eq!(fields[3].kind, FieldKind::Boolean);
    assert_eq!(fields[3].default, Some(json!(false)));

    assert_eq!(fields[4].kind, FieldKind::SingleSelect);
    assert_eq!(
        fields[4].options,
        [opt("Red", "Red"), opt("Green", "Green")]
    );
    assert_eq!(fields[4].default, Some(json!("Green")));
    // A titled option without a title falls back to its value.
    assert_eq!(
        fields[5].options,
        [opt("#FF0000", "Red"), opt("#00FF00", "#00FF00")]
    );
    assert_eq!(fields[5].default, None);
    // Legacy enumNames label by position; a missing or non-string name
    // falls back to the value.
    assert_eq!(
        fields[6].options,
        [opt("a", "A"), opt("b", "b"), opt("c", "c")]
    );

    let colours = &fields[7];
    assert_eq!(colours.kind, FieldKind::MultiSelect);
    assert!(colours.required);
    assert_eq!(colours.options, [opt("r", "Red"), opt("g", "Green")]);
    assert_eq!(colours.default, Some(json!(["r"])));
    assert_eq!(
        (colours.limits.min_items, colours.limits.max_items),
        (Some(1), Some(2))
    );
    assert_eq!(fields[8].kind, FieldKind::MultiSelect);
    assert_eq!(fields[8].limits, Limits::default());

    let nested = &fields[9];
    assert_eq!(nested.kind, FieldKind::Unsupported);
    assert_eq!(nested.title.as_deref(), Some("Nested"));
    assert!(
        nested
            .unsupported
            .as_deref()
            .unwrap()
            .contains("nested objects")
    );
}

#[test]
fn summaries_keep_only_valid_defaults() {
    // (field schema, whether its default is reported)
    let cases = [
        (json!({"type": "string", "default": "ok"}), true),
        (json!({"type": "string", "default": 5}), false),
        (
            json!({"type": "string", "maxLength": 2, "default": "long"}),
            false,
        ),
        (
            json!({"type": "string", "format": "date", "default": "2024-02-30"}),
            false,
        ),
        (
            json!({"type": "string", "format": "date", "default": "2024-02-29"}),
            true,
        ),
        (json!({"type": "number", "maximum": 1, "default": 2}), false),
        (json!({"type": "integer", "default": 1.5}), false),
        (json!({"type": "integer", "default": 2.0}), true),
        (json!({"type": "boolean", "default": "false"}), false),
        (json!({"type": "boolean", "default": null}), false),
        (
            json!({"type": "string", "enum": ["a"], "default": "b"}),
            false,
        ),
        // SEP-1330's own example defaults to the label, not the value.
        (
            json!({"type": "string", "oneOf": [{"const": "#00FF00", "title": "Green"}], "default": "Green"}),
            false,
        ),
        (
            json!({"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 1, "default": ["a", "b"]}),
            false,
        ),
        (
            json!({"type": "array", "items": {"enum": ["a", "b"]}, "default": ["a", "a"]}),
            false,
        ),
        (
            json!({"type": "array", "items": {"enum": ["a", "b"]}, "default": []}),
            true,
        ),
        (json!({"type": "string"}), false),
    ];
    for (field, kept) in cases {
        let summary = summarize_schema(&form(json!({ "f": field }), &[]));
        assert_eq!(summary[0].default.is_some(), kept, "{field}");
        if kept {
            assert_eq!(summary[0].default.as_ref(), field.get("default"));
            // A form pre-filled with the default is a valid answer.
            let answer = json!({ "f": field["default"] });
            assert!(validate_answer(&form(json!({ "f": field }), &["f"]), &answer).is_ok());
        }
    }
}

#[test]
fn summaries_of_odd_schemas() {
    assert!(summarize_schema(&json!(null)).is_empty());
    assert!(summarize_schema(&json!({"type": "object"})).is_empty());
    assert!(summarize_schema(&json!({"type": "object", "properties": []})).is_empty());
    // Without a valid top level, properties are still described.
    let fields = summarize_schema(&json!({
        "properties": {"a": {"type": "string", "title": 3}},
        "required": "a"
    }));
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].kind, FieldKind::String);
    assert_eq!(fields[0].title, None);
    assert!(!fields[0].required);
}

#[test]
fn summaries_serialize_for_the_cli() {
    let fields = summarize_schema(&form(
        json!({"n": {"type": "integer", "maximum": 5}, "s": {"type": "string", "enum": ["a"]}}),
        &["n"],
    ));
    let json = serde_json::to_value(&fields).unwrap();
    assert_eq!(
        json,
        json!([
            {
                "name": "n", "title": null, "description": null, "kind": "integer",
                "required": true, "default": null, "options": [],
                "limits": {"maximum": 5}, "unsupported": null
            },
            {
                "name": "s", "title": null, "description": null, "kind": "single_select",
                "required": false, "default": null,
                "options": [{"value": "a", "label": "a"}],
                "limits": {}, "unsupported": null
            }
        ])
    );
    let back: Vec<FieldSummary> = serde_json::from_value(json).unwrap();
    assert_eq!(back, fields);
}
