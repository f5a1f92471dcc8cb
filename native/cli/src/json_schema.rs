//! JSON Schema (as text) to the schema `lutra_core::json` follows: for `lutra serve`'s
//! `response_format` and `lutra run --json-schema`.

use lutra::core::json::{Property, Schema};
use serde_json::Value;

/// The subset of JSON Schema lutra follows: `type` (object, array, string, number, integer,
/// boolean, null), `properties` (written in the order declared), `required`, `items`,
/// `enum`, `const`; annotations (`title`, `description`, `$schema`, `default`, `examples`)
/// are ignored. Any other keyword would constrain what is not followed: refused by name.
pub fn schema_from_json(v: &Value, depth: usize) -> Result<Schema, String> {
    const ANNOTATIONS: &[&str] = &["title", "description", "$schema", "$id", "default", "examples", "$comment"];
    let Some(map) = v.as_object() else {
        return match v {
            Value::Bool(true) => Ok(Schema::Any),
            _ => Err(format!("a schema must be an object, not {v}")),
        };
    };
    if depth > lutra::core::json::MAX_DEPTH {
        return Err("the schema nests too deep".into());
    }
    for key in map.keys() {
        let known = ["type", "properties", "required", "items", "enum", "const", "additionalProperties"];
        if !known.contains(&key.as_str()) && !ANNOTATIONS.contains(&key.as_str()) {
            return Err(format!("the schema keyword '{key}' is not supported"));
        }
    }
    if let Some(value) = map.get("const") {
        return Ok(Schema::Enum(vec![value.to_string()]));
    }
    if let Some(values) = map.get("enum") {
        let values = values.as_array().ok_or("'enum' must be an array")?;
        return Ok(Schema::Enum(values.iter().map(Value::to_string).collect()));
    }
    let kind = match map.get("type") {
        None => return Ok(Schema::Any),
        Some(Value::String(kind)) => kind.as_str(),
        Some(other) => return Err(format!("'type' {other}: only a single type name is supported")),
    };
    Ok(match kind {
        "string" => Schema::String,
        "number" => Schema::Number,
        "integer" => Schema::Integer,
        "boolean" => Schema::Boolean,
        "null" => Schema::Null,
        "array" => Schema::Array(Box::new(map.get("items").map_or(Ok(Schema::Any), |items| schema_from_json(items, depth + 1))?)),
        "object" => {
            if map.get("additionalProperties").is_some_and(|a| !a.is_boolean()) {
                return Err("'additionalProperties' as a schema is not supported".into());
            }
            let required: Vec<&str> = match map.get("required") {
                None => Vec::new(),
                Some(Value::Array(names)) => {
                    names.iter().map(|n| n.as_str().ok_or("'required' must list strings")).collect::<Result<_, _>>()?
                }
                Some(_) => return Err("'required' must be an array".into()),
            };
            match map.get("properties").and_then(Value::as_object) {
                None if required.is_empty() => Schema::AnyObject,
                None => return Err("'required' names properties that 'properties' does not declare".into()),
                Some(properties) => {
                    if let Some(missing) = required.iter().find(|r| !properties.contains_key(**r)) {
                        return Err(format!("'required' names '{missing}', which 'properties' does not declare"));
                    }
                    let properties = properties
                        .iter()
                        .map(|(name, schema)| {
                            Ok(Property {
                                name: name.clone(),
                                schema: schema_from_json(schema, depth + 1)?,
                                required: required.contains(&name.as_str()),
                            })
                        })
                        .collect::<Result<Vec<_>, String>>()?;
                    Schema::Object { properties }
                }
            }
        }
        other => return Err(format!("'type' '{other}' is not a JSON Schema type")),
    })
}
