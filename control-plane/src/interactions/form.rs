//! Re-validation of form elicitation answers.
//!
//! A server asks for structured input with `elicitation/create` in form mode
//! (MCP 2025-11-25 and 2026-07-28, *Client features → Elicitation → Form Mode
//! Elicitation Requests → Requested Schema*). Its `requestedSchema` is a
//! restricted subset of JSON Schema: `{"type": "object", "properties": {...},
//! "required": [...]}` whose properties are each a `PrimitiveSchemaDefinition`
//! (`schema.ts`):
//!
//! | kind | schema |
//! | --- | --- |
//! | string | `StringSchema`: `type: "string"`, `minLength`, `maxLength`, `format` (`email`, `uri`, `date`, `date-time`) |
//! | number / integer | `NumberSchema`: `type: "number"` or `"integer"`, `minimum`, `maximum` |
//! | boolean | `BooleanSchema`: `type: "boolean"` |
//! | single select | `UntitledSingleSelectEnumSchema` (`enum`), `TitledSingleSelectEnumSchema` (`oneOf` of `{const, title}`), `LegacyTitledEnumSchema` (`enum` + `enumNames`) |
//! | multi select | `UntitledMultiSelectEnumSchema` (`type: "array"`, `items: {type: "string", enum}`), `TitledMultiSelectEnumSchema` (`items: {anyOf: [{const, title}]}`), `minItems`, `maxItems` |
//!
//! Every kind may carry `title`, `description` and `default`. When the user
//! accepts, the client returns `ElicitResult.content`, "the submitted data
//! matching the requested schema", typed `{ [key: string]: string | number |
//! boolean | string[] }`. The spec asks clients to "validate all responses
//! against the provided schema" (*Form Mode Security*); [`validate_answer`]
//! does that for the gateway before an answer is forwarded, and
//! [`summarize_schema`] describes the form for a renderer.
//!
//! # Decisions
//!
//! - **Defaults are not filled in.** The spec says "Clients that support
//!   defaults SHOULD pre-populate form fields with these values" and SEP-1034
//!   adds "Client Control: Clients retain full control over what data is sent
//!   to servers" and "Default values are visible to users who can modify them
//!   before submission". A default is a pre-fill for the form, not a fallback
//!   applied after submission: an optional field the user left out (perhaps by
//!   clearing the pre-filled value) stays out, and the content is forwarded
//!   unchanged. A required field with a default must still be present.
//!   [`summarize_schema`] reports a default only when it is itself a valid
//!   answer for its field, so a renderer that pre-fills it never produces an
//!   answer this module rejects.
//! - **Extra fields are rejected**, each named: content must be "the submitted
//!   data matching the requested schema", and the schema is "limited to flat
//!   objects with primitive properties only", so a key that is not one of the
//!   `properties` was not asked for. (Plain JSON Schema would allow it, since
//!   `additionalProperties` defaults to true; the form has no such field to
//!   show, so it cannot have come from the user.)
//! - **A property of an unsupported shape** (nested `object`, an array that is
//!   not a multi-select enum, no or an unknown `type`, a known keyword with a
//!   value of the wrong type such as `"maxLength": "5"`) cannot be answered:
//!   `PrimitiveSchemaDefinition` is the only allowed property schema and
//!   "complex nested structures, arrays of objects (beyond enums), and other
//!   advanced JSON Schema features are intentionally not supported". An answer
//!   for it is rejected (there is nothing sound to check it against), and so is
//!   a form where it is required; when it is optional and left out, the rest
//!   of the form is validated and accepted as usual.
//! - **Unknown keywords are kept and ignored**: this module only reads the
//!   schema, which is forwarded as is. That includes `pattern` (shown in the
//!   2025-11-25 prose example but absent from `StringSchema` in `schema.ts`
//!   and dropped from the 2026-07-28 example), `exclusiveMinimum`,
//!   `uniqueItems`, `$schema`, `x-*` and the like. An unknown `format` value is
//!   not checked (formats are annotations in JSON Schema 2020-12, the default
//!   dialect since SEP-1613). Display-only keywords of the wrong type
//!   (`title`, `description`, `enumNames`, option titles) are ignored too.
//! - A `null` value for a field is rejected: the content type has no null;
//!   leave the field out instead. A `null` (or non-object) `content` is
//!   rejected: content is present only for `accept`.
//! - Strings: `minLength`/`maxLength` count Unicode scalar values (Rust
//!   `char`s; JSON Schema counts characters as defined by RFC 8259, and JSON
//!   text from serde_json cannot hold lone surrogates). `email` is RFC 5321
//!   `Mailbox` (dot-atom or quoted local part of at most 64 octets; a host
//!   name or `[IPv4]`/`[IPv6:...]` literal; ASCII only, since non-ASCII
//!   addresses are JSON Schema's separate `idn-email`). `uri` is an RFC 3986
//!   absolute `URI` (scheme required, percent-encodings well formed, ASCII
//!   only; non-ASCII is `iri`). `date` is RFC 3339 `full-date` (`YYYY-MM-DD`,
//!   Gregorian leap years); `date-time` is RFC 3339 `date-time`: `T` (or `t`),
//!   seconds required, optional fractional seconds, and an offset `Z`/`z` or
//!   `±HH:MM`; second 60 only where it is 23:59:60 UTC.
//! - Numbers: `integer` accepts any number with no fractional part (`3.0`
//!   too, as JSON Schema 2020-12 does); `minimum`/`maximum` are inclusive;
//!   no strings-to-numbers coercion.
//! - Multi-select: every item must be one of the options and appear at most
//!   once (a set of checkboxes cannot tick an option twice, and a duplicate
//!   would count twice towards `minItems`). Titled multi-selects also accept
//!   `items.oneOf`, the spelling in SEP-1330's prose, besides `items.anyOf`.
//!   A single select with both `enum` and `oneOf` uses `enum`.
//!
//! # Errors
//!
//! [`FormErrors`] lists every problem found, each a [`FormError`] naming the
//! field and the rule. Problems with the top level of the schema use the field
//! name [`SCHEMA_FIELD`] and stop validation; a `content` that is not an object
//! uses [`CONTENT_FIELD`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::net::{Ipv4Addr, Ipv6Addr};
use switchyard_mcp::jsonrpc::kind_of;

#[cfg(test)]
mod tests;

/// The `field` of errors about the top level of `requestedSchema` itself.
pub const SCHEMA_FIELD: &str = "requestedSchema";
/// The `field` of errors about `content` as a whole (null, not an object).
pub const CONTENT_FIELD: &str = "content";

/// Longest rendering of a user's value inside an error message.
const SHOW_MAX: usize = 60;
/// Most options listed in an "is not one of the options" message.
const OPTIONS_SHOWN: usize = 10;

/// One problem with an answer: the field (a property name, or
/// [`SCHEMA_FIELD`] / [`CONTENT_FIELD`]) and what is wrong with it, naming
/// the rule, e.g. `age: 200 is above the maximum 150`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct FormError {
    /// The property name as it appears in `requestedSchema.properties`.
    pub field: String,
    /// What is wrong, in words, with the offending value (shortened) and rule.
    pub problem: String,
}

/// Every problem found in one answer, in schema order (then extra fields in
/// content order). Displays as the problems joined by `; `, e.g.
/// `email: "not-an-email" is not a valid email address; age: 200 is above the
/// maximum 150`. Never empty when returned by [`validate_answer`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{}", join(.0))]
pub struct FormErrors(pub Vec<FormError>);

impl FormErrors {
    /// The problems, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, FormError> {
        self.0.iter()
    }

    /// The problems with one field.
    pub fn for_field<'a>(&'a self, field: &'a str) -> impl Iterator<Item = &'a FormError> + 'a {
        self.0.iter().filter(move |e| e.field == field)
    }
}

impl<'a> IntoIterator for &'a FormErrors {
    type Item = &'a FormError;
    type IntoIter = std::slice::Iter<'a, FormError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

fn join(errors: &[FormError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What kind of input a field is, as a renderer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    /// `StringSchema`: free text, perhaps with a `format`.
    String,
    /// `NumberSchema` with `type: "number"`.
    Number,
    /// `NumberSchema` with `type: "integer"`.
    Integer,
    /// `BooleanSchema`.
    Boolean,
    /// One of [`FieldSummary::options`] (a string).
    SingleSelect,
    /// Any number of [`FieldSummary::options`] (an array of strings).
    MultiSelect,
    /// Not an MCP elicitation primitive schema; see
    /// [`FieldSummary::unsupported`]. No answer for it is accepted.
    Unsupported,
}

/// One option of a select: the value sent back and the label shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectOption {
    /// The value (`enum` entry or `const`).
    pub value: String,
    /// The label: the option's `title`, the legacy `enumNames` entry, or the
    /// value itself.
    pub label: String,
}

/// The limits that apply to a field; only those of its kind are ever set.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// `minLength`, in Unicode scalar values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_length: Option<u64>,
    /// `maxLength`, in Unicode scalar values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// `format` as given; only `email`, `uri`, `date` and `date-time` are
    /// checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// `minimum` (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<Number>,
    /// `maximum` (inclusive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<Number>,
    /// `minItems` of a multi-select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_items: Option<u64>,
    /// `maxItems` of a multi-select.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_items: Option<u64>,
}

/// A description of one form field, for rendering a form card.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FieldSummary {
    /// The property name (the key in `content`).
    pub name: String,
    /// `title`, if it is a string.
    pub title: Option<String>,
    /// `description`, if it is a string.
    pub description: Option<String>,
    /// The kind of input.
    pub kind: FieldKind,
    /// Listed in `required`.
    pub required: bool,
    /// `default`, only when it is a valid answer for this field (so a form
    /// pre-filled with it passes [`validate_answer`]).
    pub default: Option<Value>,
    /// The options of a select, in schema order; empty otherwise.
    pub options: Vec<SelectOption>,
    /// The limits of the field.
    pub limits: Limits,
    /// Why the field's schema is not supported, for [`FieldKind::Unsupported`].
    pub unsupported: Option<String>,
}

/// Checks a user's accepted answer against the server's `requestedSchema`
/// (MCP *Elicitation → Requested Schema*; `ElicitRequestFormParams`,
/// `PrimitiveSchemaDefinition`, `ElicitResult` in `schema.ts`, 2025-11-25 and
/// 2026-07-28).
///
/// `content` is `ElicitResult.content` for `action: "accept"`; call this only
/// for accepted form answers (decline and cancel carry no content). On success
/// it returns the content to forward, which is `content` unchanged: defaults
/// are not filled in and nothing is coerced (see the module documentation).
///
/// # Errors
///
/// Every problem found, each naming the field and the rule: a malformed top
/// level of the schema ([`SCHEMA_FIELD`]; nothing else is checked then),
/// `content` not an object ([`CONTENT_FIELD`]), a missing required field,
/// `null`, a value of the wrong JSON type, a broken `minLength`, `maxLength`,
/// `format`, `minimum`, `maximum`, integrality, option, `minItems`,
/// `maxItems` or uniqueness rule, an answer for a field whose schema is not a
/// supported primitive, and a field the schema does not have.
pub fn validate_answer(requested_schema: &Value, content: &Value) -> Result<Value, FormErrors> {
    let form = parse_form(requested_schema).map_err(FormErrors)?;
    let Some(answers) = content.as_object() else {
        let problem = if content.is_null() {
            "an accepted form answer must be an object; null content is only valid when the user \
             declines or cancels"
                .to_owned()
        } else {
            format!(
                "an accepted form answer must be an object, not {} {}",
                kind_of(content),
                show(content)
            )
        };
        return Err(FormErrors(vec![error(CONTENT_FIELD, problem)]));
    };

    let mut errors = Vec::new();
    for field in &form.fields {
        match (answers.get(field.name), &field.spec) {
            (None, Ok(_)) if field.required => {
                errors.push(error(field.name, "is required but missing".to_owned()));
            }
            (None, Err(why)) if field.required => errors.push(error(
                field.name,
                format!("is required but cannot be answered: {}", unsupported(why)),
            )),
            (None, _) => {}
            (Some(Value::Null), _) => errors.push(error(
                field.name,
                if field.required {
                    "is required; null is not an answer".to_owned()
                } else {
                    "null is not allowed; leave the field out instead".to_owned()
                },
            )),
            (Some(_), Err(why)) => errors.push(error(
                field.name,
                format!("cannot be answered: {}", unsupported(why)),
            )),
            (Some(value), Ok(spec)) => {
                for problem in check(spec, value) {
                    errors.push(error(field.name, problem));
                }
            }
        }
    }
    for key in answers.keys() {
        if !form.fields.iter().any(|f| f.name == key) {
            let known: Vec<&str> = form.fields.iter().map(|f| f.name).collect();
            let problem = if known.is_empty() {
                "is not a field of the requested schema (it has no fields)".to_owned()
            } else {
                format!(
                    "is not a field of the requested schema (its fields are {})",
                    known.join(", ")
                )
            };
            errors.push(error(key, problem));
        }
    }
    if errors.is_empty() {
        Ok(content.clone())
    } else {
        Err(FormErrors(errors))
    }
}

/// Describes each property of `requestedSchema`, in schema order, for
/// rendering a form: name, title, description, kind, whether it is required,
/// its default (only if valid), the options of a select (value and label) and
/// its limits. Properties of an unsupported shape are listed with
/// [`FieldKind::Unsupported`] and the reason. Never fails: a schema without a
/// `properties` object gives no fields (use [`validate_answer`] to learn what
/// is wrong with it).
pub fn summarize_schema(requested_schema: &Value) -> Vec<FieldSummary> {
    let Some(properties) = requested_schema
        .get("properties")
        .and_then(Value::as_object)
    else {
        return Vec::new();
    };
    let required = required_names(requested_schema);
    properties
        .iter()
        .map(|(name, schema)| summarize_field(name, schema, required.contains(&name.as_str())))
        .collect()
}

fn summarize_field(name: &str, schema: &Value, required: bool) -> FieldSummary {
    let text = |key: &str| schema.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut summary = FieldSummary {
        name: name.to_owned(),
        title: text("title"),
        description: text("description"),
        kind: FieldKind::Unsupported,
        required,
        default: None,
        options: Vec::new(),
        limits: Limits::default(),
        unsupported: None,
    };
    let spec = match classify(schema) {
        Ok(spec) => spec,
        Err(why) => {
            summary.unsupported = Some(why);
            return summary;
        }
    };
    summary.default = schema
        .get("default")
        .filter(|d| !d.is_null() && check(&spec, d).is_empty())
        .cloned();
    match spec {
        Spec::Text {
            min_length,
            max_length,
            format,
        } => {
            summary.kind = FieldKind::String;
            summary.limits.min_length = min_length;
            summary.limits.max_length = max_length;
            summary.limits.format = format;
        }
        Spec::Number {
            integer,
            minimum,
            maximum,
        } => {
            summary.kind = if integer {
                FieldKind::Integer
            } else {
                FieldKind::Number
            };
            summary.limits.minimum = minimum;
            summary.limits.maximum = maximum;
        }
        Spec::Boolean => summary.kind = FieldKind::Boolean,
        Spec::Single { options } => {
            summary.kind = FieldKind::SingleSelect;
            summary.options = options;
        }
        Spec::Multi {
            options,
            min_items,
            max_items,
        } => {
            summary.kind = FieldKind::MultiSelect;
            summary.options = options;
            summary.limits.min_items = min_items;
            summary.limits.max_items = max_items;
        }
    }
    summary
}

// ---------------------------------------------------------------------------
// The schema.

/// A parsed `requestedSchema`.
struct Form<'a> {
    fields: Vec<Field<'a>>,
}

struct Field<'a> {
    name: &'a str,
    required: bool,
    /// The field's rules, or why its schema is not a supported primitive.
    spec: Result<Spec, String>,
}

/// The checkable rules of one primitive property.
enum Spec {
    Text {
        min_length: Option<u64>,
        max_length: Option<u64>,
        format: Option<String>,
    },
    Number {
        integer: bool,
        minimum: Option<Number>,
        maximum: Option<Number>,
    },
    Boolean,
    Single {
        options: Vec<SelectOption>,
    },
    Multi {
        options: Vec<SelectOption>,
        min_items: Option<u64>,
        max_items: Option<u64>,
    },
}

fn parse_form(schema: &Value) -> Result<Form<'_>, Vec<FormError>> {
    let Some(top) = schema.as_object() else {
        return Err(vec![error(
            SCHEMA_FIELD,
            format!(
                "must be a JSON object with \"type\": \"object\" and \"properties\", not {} {}",
                kind_of(schema),
                show(schema)
            ),
        )]);
    };
    let mut errors = Vec::new();
    match top.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => errors.push(error(
            SCHEMA_FIELD,
            format!(
                "\"type\" must be \"object\" (a flat object of primitive fields), not {}",
                show(other)
            ),
        )),
        None => errors.push(error(
            SCHEMA_FIELD,
            "\"type\" must be \"object\" (a flat object of primitive fields) but is missing"
                .to_owned(),
        )),
    }
    let properties = match top.get("properties") {
        Some(Value::Object(p)) => Some(p),
        Some(other) => {
            errors.push(error(
                SCHEMA_FIELD,
                format!(
                    "\"properties\" must be an object mapping field names to primitive schemas, \
                     not {}",
                    show(other)
                ),
            ));
            None
        }
        None => {
            errors.push(error(
                SCHEMA_FIELD,
                "\"properties\" must be an object mapping field names to primitive schemas but \
                 is missing"
                    .to_owned(),
            ));
            None
        }
    };
    let required: Vec<&str> = match top.get("required") {
        None => Vec::new(),
        Some(Value::Array(names)) if names.iter().all(Value::is_string) => {
            names.iter().filter_map(Value::as_str).collect()
        }
        Some(other) => {
            errors.push(error(
                SCHEMA_FIELD,
                format!(
                    "\"required\" must be an array of field names, not {}",
                    show(other)
                ),
            ));
            Vec::new()
        }
    };
    if let Some(properties) = properties {
        for name in &required {
            if !properties.contains_key(*name) {
                errors.push(error(
                    SCHEMA_FIELD,
                    format!("\"required\" lists {name:?}, which is not in \"properties\""),
                ));
            }
        }
    }
    let Some(properties) = properties else {
        return Err(errors);
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    let fields = properties
        .iter()
        .map(|(name, schema)| Field {
            name,
            required: required.contains(&name.as_str()),
            spec: classify(schema),
        })
        .collect();
    Ok(Form { fields })
}

fn required_names(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Reads one property schema as a `PrimitiveSchemaDefinition`, or says why
/// it is not one.
fn classify(schema: &Value) -> Result<Spec, String> {
    let Some(obj) = schema.as_object() else {
        return Err(format!(
            "the field's schema is {} {}, not an object",
            kind_of(schema),
            show(schema)
        ));
    };
    let ty = match obj.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(other) => {
            return Err(format!(
                "\"type\" must be one of \"string\", \"number\", \"integer\", \"boolean\" or \
                 \"array\", not {}",
                show(other)
            ));
        }
        None => return Err("the field's schema has no \"type\"".to_owned()),
    };
    match ty {
        "string" => {
            if let Some(values) = obj.get("enum") {
                Ok(Spec::Single {
                    options: enum_options(values, obj.get("enumNames"))?,
                })
            } else if let Some(list) = obj.get("oneOf") {
                Ok(Spec::Single {
                    options: titled_options(list, "oneOf")?,
                })
            } else {
                let format = match obj.get("format") {
                    None => None,
                    Some(Value::String(f)) => Some(f.clone()),
                    Some(other) => {
                        return Err(format!("\"format\" must be a string, not {}", show(other)));
                    }
                };
                Ok(Spec::Text {
                    min_length: count_keyword(obj, "minLength")?,
                    max_length: count_keyword(obj, "maxLength")?,
                    format,
                })
            }
        }
        "number" | "integer" => Ok(Spec::Number {
            integer: ty == "integer",
            minimum: number_keyword(obj, "minimum")?,
            maximum: number_keyword(obj, "maximum")?,
        }),
        "boolean" => Ok(Spec::Boolean),
        "array" => {
            let Some(items) = obj.get("items").and_then(Value::as_object) else {
                return Err(
                    "arrays are only supported as multi-select enums, and this one has \
                            no \"items\" object listing the options"
                        .to_owned(),
                );
            };
            match items.get("type") {
                None => {}
                Some(Value::String(t)) if t == "string" => {}
                Some(other) => {
                    return Err(format!(
                        "arrays are only supported as multi-select enums of strings, not of \
                         \"type\" {}",
                        show(other)
                    ));
                }
            }
            let options = if let Some(values) = items.get("enum") {
                enum_options(values, None)?
            } else if let Some(list) = items.get("anyOf") {
                titled_options(list, "anyOf")?
            } else if let Some(list) = items.get("oneOf") {
                titled_options(list, "oneOf")?
            } else {
                return Err(
                    "arrays are only supported as multi-select enums, and this one's \
                            \"items\" has neither \"enum\" nor \"anyOf\""
                        .to_owned(),
                );
            };
            Ok(Spec::Multi {
                options,
                min_items: count_keyword(obj, "minItems")?,
                max_items: count_keyword(obj, "maxItems")?,
            })
        }
        "object" => Err(
            "nested objects are not supported; form elicitation asks for a flat \
                         object of primitive fields"
                .to_owned(),
        ),
        other => Err(format!(
            "\"type\" {other:?} is not one of \"string\", \"number\", \"integer\", \"boolean\" \
             or \"array\""
        )),
    }
}

fn enum_options(values: &Value, names: Option<&Value>) -> Result<Vec<SelectOption>, String> {
    let Value::Array(values) = values else {
        return Err(format!(
            "\"enum\" must be an array of strings, not {}",
            show(values)
        ));
    };
    let names = names.and_then(Value::as_array);
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let Value::String(value) = v else {
                return Err(format!("\"enum\" value {} is not a string", show(v)));
            };
            let label = names
                .and_then(|n| n.get(i))
                .and_then(Value::as_str)
                .unwrap_or(value);
            Ok(SelectOption {
                value: value.clone(),
                label: label.to_owned(),
            })
        })
        .collect()
}

fn titled_options(list: &Value, keyword: &str) -> Result<Vec<SelectOption>, String> {
    let Value::Array(list) = list else {
        return Err(format!(
            "{keyword:?} must be an array of {{\"const\", \"title\"}} options, not {}",
            show(list)
        ));
    };
    list.iter()
        .enumerate()
        .map(|(i, option)| {
            let Some(value) = option.get("const").and_then(Value::as_str) else {
                return Err(format!(
                    "{keyword:?} option {} has no string \"const\": {}",
                    i + 1,
                    show(option)
                ));
            };
            let label = option.get("title").and_then(Value::as_str).unwrap_or(value);
            Ok(SelectOption {
                value: value.to_owned(),
                label: label.to_owned(),
            })
        })
        .collect()
}

fn count_keyword(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    let Some(v) = obj.get(key) else {
        return Ok(None);
    };
    let count = v.as_number().and_then(|n| {
        n.as_u64().or_else(|| {
            let f = n.as_f64()?;
            // Integral and in range, so the cast is exact.
            (f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64).then_some(f as u64)
        })
    });
    count
        .map(Some)
        .ok_or_else(|| format!("{key:?} must be a non-negative integer, not {}", show(v)))
}

fn number_keyword(obj: &Map<String, Value>, key: &str) -> Result<Option<Number>, String> {
    match obj.get(key) {
        None => Ok(None),
        Some(Value::Number(n)) => Ok(Some(n.clone())),
        Some(other) => Err(format!("{key:?} must be a number, not {}", show(other))),
    }
}

// ---------------------------------------------------------------------------
// The answer.

/// The problems with one (non-null) answer.
fn check(spec: &Spec, value: &Value) -> Vec<String> {
    match spec {
        Spec::Text {
            min_length,
            max_length,
            format,
        } => {
            let Value::String(s) = value else {
                return vec![wrong_type("a string", value)];
            };
            let mut problems = Vec::new();
            let len = s.chars().count() as u64;
            if let Some(min) = min_length
                && len < *min
            {
                problems.push(format!(
                    "{} is {len} characters long, below the minimum length {min} (minLength)",
                    show(value)
                ));
            }
            if let Some(max) = max_length
                && len > *max
            {
                problems.push(format!(
                    "{} is {len} characters long, above the maximum length {max} (maxLength)",
                    show(value)
                ));
            }
            let bad_format = match format.as_deref() {
                Some("email") if !is_email(s) => Some("a valid email address"),
                Some("uri") if !is_uri(s) => Some("a valid URI (RFC 3986, with a scheme)"),
                Some("date") if !is_date(s) => {
                    Some("a valid date (RFC 3339 full-date, YYYY-MM-DD)")
                }
                Some("date-time") if !is_date_time(s) => {
                    Some("a valid date-time (RFC 3339, e.g. 2025-01-31T09:30:00Z)")
                }
                _ => None,
            };
            if let Some(what) = bad_format {
                problems.push(format!("{} is not {what}", show(value)));
            }
            problems
        }
        Spec::Number {
            integer,
            minimum,
            maximum,
        } => {
            let Value::Number(n) = value else {
                return vec![wrong_type(
                    if *integer { "an integer" } else { "a number" },
                    value,
                )];
            };
            let mut problems = Vec::new();
            if *integer && !is_integral(n) {
                problems.push(format!("{n} is not an integer"));
            }
            if let Some(min) = minimum
                && compare(n, min) == Ordering::Less
            {
                problems.push(format!("{n} is below the minimum {min}"));
            }
            if let Some(max) = maximum
                && compare(n, max) == Ordering::Greater
            {
                problems.push(format!("{n} is above the maximum {max}"));
            }
            problems
        }
        Spec::Boolean => {
            if value.is_boolean() {
                Vec::new()
            } else {
                vec![wrong_type("a boolean", value)]
            }
        }
        Spec::Single { options } => {
            let Value::String(s) = value else {
                return vec![wrong_type("a string (one of the options)", value)];
            };
            if options.iter().any(|o| &o.value == s) {
                Vec::new()
            } else {
                vec![not_an_option(value, options)]
            }
        }
        Spec::Multi {
            options,
            min_items,
            max_items,
        } => {
            let Value::Array(items) = value else {
                return vec![wrong_type(
                    "an array of strings (the selected options)",
                    value,
                )];
            };
            let mut problems = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let Value::String(s) = item else {
                    problems.push(format!("item {} ({}) is not a string", i + 1, show(item)));
                    continue;
                };
                if !options.iter().any(|o| &o.value == s) {
                    problems.push(not_an_option(item, options));
                } else if items[..i].iter().filter(|x| *x == item).count() == 1 {
                    // Each duplicated option is reported once, at its second use.
                    problems.push(format!("{} is selected more than once", show(item)));
                }
            }
            let n = items.len() as u64;
            if let Some(min) = min_items
                && n < *min
            {
                problems.push(format!("{n} selected, below the minimum {min} (minItems)"));
            }
            if let Some(max) = max_items
                && n > *max
            {
                problems.push(format!("{n} selected, above the maximum {max} (maxItems)"));
            }
            problems
        }
    }
}

fn not_an_option(value: &Value, options: &[SelectOption]) -> String {
    if options.is_empty() {
        return format!(
            "{} is not an option (the field has no options)",
            show(value)
        );
    }
    let mut listed: Vec<String> = options
        .iter()
        .take(OPTIONS_SHOWN)
        .map(|o| {
            if o.label == o.value {
                format!("{:?}", o.value)
            } else {
                format!("{:?} ({})", o.value, o.label)
            }
        })
        .collect();
    if options.len() > OPTIONS_SHOWN {
        listed.push(format!("and {} more", options.len() - OPTIONS_SHOWN));
    }
    format!(
        "{} is not one of the options {}",
        show(value),
        listed.join(", ")
    )
}

fn is_integral(n: &Number) -> bool {
    n.is_i64()
        || n.is_u64()
        || n.as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// Orders two JSON numbers: exactly when both are integers, else as `f64`.
fn compare(a: &Number, b: &Number) -> Ordering {
    let int = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    if let (Some(x), Some(y)) = (int(a), int(b)) {
        return x.cmp(&y);
    }
    let (x, y) = (
        a.as_f64().unwrap_or(f64::NAN),
        b.as_f64().unwrap_or(f64::NAN),
    );
    x.partial_cmp(&y).unwrap_or(Ordering::Equal)
}

fn wrong_type(expected: &str, value: &Value) -> String {
    format!(
        "expected {expected}, got {} {}",
        kind_of(value),
        show(value)
    )
}

/// The value as JSON, shortened to [`SHOW_MAX`] characters.
fn show(value: &Value) -> String {
    let s = value.to_string();
    if s.chars().count() <= SHOW_MAX {
        s
    } else {
        let mut short: String = s.chars().take(SHOW_MAX - 1).collect();
        short.push('…');
        short
    }
}

fn error(field: &str, problem: String) -> FormError {
    FormError {
        field: field.to_owned(),
        problem,
    }
}

fn unsupported(why: &str) -> String {
    format!("its schema is not a supported MCP elicitation primitive ({why})")
}

// ---------------------------------------------------------------------------
// Formats.

/// RFC 5321 `Mailbox`: `Local-part "@" ( Domain / address-literal )`.
fn is_email(s: &str) -> bool {
    let Some(at) = s.rfind('@') else {
        return false;
    };
    let (local, domain) = (&s[..at], &s[at + 1..]);
    if local.is_empty() || local.len() > 64 {
        return false;
    }
    if !(is_dot_atom(local) || is_quoted_string(local)) {
        return false;
    }
    is_domain(domain) || is_address_literal(domain)
}

fn is_atext(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-/=?^_`{|}~".contains(&b)
}

fn is_dot_atom(s: &str) -> bool {
    s.split('.')
        .all(|atom| !atom.is_empty() && atom.bytes().all(is_atext))
}

/// `DQUOTE *(qtextSMTP / quoted-pairSMTP) DQUOTE`, printable ASCII only.
fn is_quoted_string(s: &str) -> bool {
    let Some(inner) = s.strip_prefix('"').and_then(|rest| rest.strip_suffix('"')) else {
        return false;
    };
    let mut bytes = inner.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(c) if (32..=126).contains(&c) => {}
                _ => return false,
            },
            b'"' => return false,
            32..=126 => {}
            _ => return false,
        }
    }
    true
}

/// A host name: dot-separated labels of letters, digits and inner hyphens,
/// each 1-63 octets, 253 in all.
fn is_domain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// `[IPv4]` or `[IPv6:address]`.
fn is_address_literal(s: &str) -> bool {
    let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) else {
        return false;
    };
    match inner.get(..5) {
        Some(tag) if tag.eq_ignore_ascii_case("IPv6:") => inner[5..].parse::<Ipv6Addr>().is_ok(),
        _ => inner.parse::<Ipv4Addr>().is_ok(),
    }
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

fn is_pchar(b: u8) -> bool {
    is_unreserved(b) || is_sub_delim(b) || b == b':' || b == b'@'
}

/// Every octet is allowed or part of a well-formed `%XX`.
fn chars_ok(s: &str, allowed: impl Fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = |j: usize| b.get(j).is_some_and(u8::is_ascii_hexdigit);
            if !(hex(i + 1) && hex(i + 2)) {
                return false;
            }
            i += 3;
        } else if allowed(b[i]) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

/// RFC 3986 `URI = scheme ":" hier-part [ "?" query ] [ "#" fragment ]`.
fn is_uri(s: &str) -> bool {
    let Some((scheme, rest)) = s.split_once(':') else {
        return false;
    };
    let mut scheme_bytes = scheme.bytes();
    if !scheme_bytes.next().is_some_and(|b| b.is_ascii_alphabetic())
        || !scheme_bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
    {
        return false;
    }
    let query_char = |b: u8| is_pchar(b) || b == b'/' || b == b'?';
    let (rest, fragment) = match rest.split_once('#') {
        Some((r, f)) => (r, Some(f)),
        None => (rest, None),
    };
    if fragment.is_some_and(|f| !chars_ok(f, query_char)) {
        return false;
    }
    let (hier, query) = match rest.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (rest, None),
    };
    if query.is_some_and(|q| !chars_ok(q, query_char)) {
        return false;
    }
    let path_char = |b: u8| is_pchar(b) || b == b'/';
    match hier.strip_prefix("//") {
        Some(after) => {
            let (authority, path) = match after.find('/') {
                Some(i) => after.split_at(i),
                None => (after, ""),
            };
            is_authority(authority) && chars_ok(path, path_char)
        }
        None => chars_ok(hier, path_char),
    }
}

/// `[ userinfo "@" ] host [ ":" port ]`.
fn is_authority(s: &str) -> bool {
    let host_port = match s.rsplit_once('@') {
        Some((userinfo, host_port)) => {
            if !chars_ok(userinfo, |b| {
                is_unreserved(b) || is_sub_delim(b) || b == b':'
            }) {
                return false;
            }
            host_port
        }
        None => s,
    };
    let (host_ok, port) = if let Some(literal) = host_port.strip_prefix('[') {
        let Some((inside, after)) = literal.split_once(']') else {
            return false;
        };
        let port = match after {
            "" => "",
            _ => match after.strip_prefix(':') {
                Some(p) => p,
                None => return false,
            },
        };
        (is_ip_literal(inside), port)
    } else {
        let (host, port) = host_port.rsplit_once(':').unwrap_or((host_port, ""));
        (
            chars_ok(host, |b| is_unreserved(b) || is_sub_delim(b)),
            port,
        )
    };
    host_ok && port.bytes().all(|b| b.is_ascii_digit())
}

/// `IPv6address / IPvFuture` (inside the brackets).
fn is_ip_literal(s: &str) -> bool {
    if let Some(future) = s.strip_prefix(['v', 'V']) {
        let Some((version, rest)) = future.split_once('.') else {
            return false;
        };
        return !version.is_empty()
            && version.bytes().all(|b| b.is_ascii_hexdigit())
            && !rest.is_empty()
            && rest
                .bytes()
                .all(|b| is_unreserved(b) || is_sub_delim(b) || b == b':');
    }
    s.parse::<Ipv6Addr>().is_ok()
}

/// Two ASCII digits at `b[i..i + 2]`.
fn two_digits(b: &[u8], i: usize) -> Option<u32> {
    let (x, y) = (*b.get(i)?, *b.get(i + 1)?);
    (x.is_ascii_digit() && y.is_ascii_digit())
        .then(|| u32::from(x - b'0') * 10 + u32::from(y - b'0'))
}

/// RFC 3339 `full-date` at the start of `b` (10 octets).
fn full_date(b: &[u8]) -> bool {
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let (Some(century), Some(yy), Some(month), Some(day)) = (
        two_digits(b, 0),
        two_digits(b, 2),
        two_digits(b, 5),
        two_digits(b, 8),
    ) else {
        return false;
    };
    let year = century * 100 + yy;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&day)
}

fn is_date(s: &str) -> bool {
    s.len() == 10 && full_date(s.as_bytes())
}

/// RFC 3339 `date-time = full-date "T" partial-time time-offset`.
fn is_date_time(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 20 || !full_date(b) || !matches!(b[10], b'T' | b't') {
        return false;
    }
    if b[13] != b':' || b[16] != b':' {
        return false;
    }
    let (Some(hour), Some(minute), Some(second)) =
        (two_digits(b, 11), two_digits(b, 14), two_digits(b, 17))
    else {
        return false;
    };
    if hour > 23 || minute > 59 || second > 60 {
        return false;
    }
    let mut i = 19;
    if b[i] == b'.' {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return false;
        }
        i += 1 + digits;
    }
    // Offset east of UTC, in minutes.
    let offset: i64 = match &b[i..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (Some(oh), Some(om)) = (two_digits(b, i + 1), two_digits(b, i + 4)) else {
                return false;
            };
            if oh > 23 || om > 59 {
                return false;
            }
            let minutes = i64::from(oh * 60 + om);
            if *sign == b'-' { -minutes } else { minutes }
        }
        _ => return false,
    };
    if second == 60 {
        // A leap second is only ever 23:59:60 UTC.
        let utc = (i64::from(hour * 60 + minute) - offset).rem_euclid(24 * 60);
        return utc == 23 * 60 + 59;
    }
    true
}
