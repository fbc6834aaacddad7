//! Wire types shared by every endpoint: a required-but-nullable wrapper and the one timestamp format.

use std::borrow::Cow;

use chrono::{DateTime, Utc};
use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef, Registry},
    types::{MaybeUndefined, ParseError, ParseFromJSON, ParseResult, ToJSON, Type},
};
use serde_json::Value;

use crate::platform::Patch;

/// A field that is always present in a response and may be `null`.
///
/// poem-openapi's `Option<T>` is "not required" in the generated schema; the spec's nullable
/// fields are required, so this says `required` + `nullable: true` and writes `null`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Nullable<T>(pub Option<T>);

impl<T> From<Option<T>> for Nullable<T> {
    fn from(value: Option<T>) -> Self {
        Self(value)
    }
}

impl<T: Type> Type for Nullable<T> {
    const IS_REQUIRED: bool = true;
    type RawValueType = T::RawValueType;
    type RawElementValueType = T::RawElementValueType;

    fn name() -> Cow<'static, str> {
        format!("nullable_{}", T::name()).into()
    }

    fn schema_ref() -> MetaSchemaRef {
        match T::schema_ref() {
            // An enum is described inline with `null` among its values: under OpenAPI 3.0.3
            // `nullable` only adds null to the `type` beside it, and an `enum` must list null
            // itself, so `allOf: [$ref]` + `nullable` refuses null in strict validators.
            MetaSchemaRef::Reference(name) if !enum_items_of::<T>(&name).is_empty() => {
                let mut items = enum_items_of::<T>(&name);
                items.push(Value::Null);
                MetaSchemaRef::Inline(Box::new(MetaSchema {
                    ty: "string",
                    enum_items: items,
                    nullable: true,
                    ..MetaSchema::ANY
                }))
            }
            // An object is described inline with `nullable`: strict OpenAPI 3.0.3 readers
            // refuse null for `allOf: [$ref]` even with `nullable` beside it.
            MetaSchemaRef::Reference(name) if registered_object::<T>(&name).is_some() => {
                let mut schema = registered_object::<T>(&name).unwrap_or(MetaSchema::ANY);
                schema.nullable = true;
                MetaSchemaRef::Inline(Box::new(schema))
            }
            // Other references: `allOf` with the one reference carries `nullable`, which SDK
            // generators read as "this type or null".
            reference @ MetaSchemaRef::Reference(_) => {
                MetaSchemaRef::Inline(Box::new(MetaSchema {
                    all_of: vec![reference],
                    nullable: true,
                    ..MetaSchema::ANY
                }))
            }
            MetaSchemaRef::Inline(mut schema) => {
                schema.nullable = true;
                MetaSchemaRef::Inline(schema)
            }
        }
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        self.0.as_ref().and_then(|v| v.as_raw_value())
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        match &self.0 {
            Some(v) => v.raw_element_iter(),
            None => Box::new(std::iter::empty()),
        }
    }
}

/// The object schema `T` registers under `name`, when it is an object.
fn registered_object<T: Type>(name: &str) -> Option<MetaSchema> {
    let mut registry = Registry::new();
    T::register(&mut registry);
    registry
        .schemas
        .get(name)
        .filter(|schema| schema.ty == "object")
        .cloned()
}

/// The values of the enum `T` registers under `name` (empty when it is not an enum).
fn enum_items_of<T: Type>(name: &str) -> Vec<Value> {
    let mut registry = Registry::new();
    T::register(&mut registry);
    registry
        .schemas
        .get(name)
        .map(|schema| schema.enum_items.clone())
        .unwrap_or_default()
}

impl<T: ParseFromJSON> ParseFromJSON for Nullable<T> {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value {
            None | Some(Value::Null) => Ok(Self(None)),
            Some(v) => T::parse_from_json(Some(v))
                .map(|v| Self(Some(v)))
                .map_err(ParseError::propagate),
        }
    }
}

impl<T: ToJSON> ToJSON for Nullable<T> {
    fn to_json(&self) -> Option<Value> {
        Some(
            self.0
                .as_ref()
                .and_then(|v| v.to_json())
                .unwrap_or(Value::Null),
        )
    }
}

/// Every `...At` field, in the form [`crate::timestamp::format`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub DateTime<Utc>);

impl From<DateTime<Utc>> for Timestamp {
    fn from(value: DateTime<Utc>) -> Self {
        Self(value)
    }
}

impl Type for Timestamp {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "string_date-time".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema::new_with_format("string", "date-time")))
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(std::iter::once(self))
    }
}

impl ParseFromJSON for Timestamp {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value {
            Some(Value::String(s)) => DateTime::parse_from_rfc3339(&s)
                .map(|dt| Self(dt.with_timezone(&Utc)))
                .map_err(|e| ParseError::custom(e.to_string())),
            other => Err(ParseError::expected_type(other.unwrap_or_default())),
        }
    }
}

impl ToJSON for Timestamp {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(crate::timestamp::format(&self.0)))
    }
}

/// Converts an optional stored time into the wire form.
pub fn ts_opt(value: Option<DateTime<Utc>>) -> Nullable<Timestamp> {
    Nullable(value.map(Timestamp))
}

/// Reads a poem-openapi `Enum` from its stored string form.
pub fn parse_enum<E: ParseFromJSON>(raw: &str) -> Option<E> {
    E::parse_from_json(Some(Value::String(raw.to_string()))).ok()
}

/// An optional nullable body field, as the domain takes it.
impl<T> From<MaybeUndefined<T>> for Patch<T> {
    fn from(value: MaybeUndefined<T>) -> Self {
        match value {
            MaybeUndefined::Undefined => Patch::Absent,
            MaybeUndefined::Null => Patch::Null,
            MaybeUndefined::Value(v) => Patch::Value(v),
        }
    }
}

/// An optional body field that may be null: absent, null (clear it) or a value. Described as
/// the value's schema with `nullable`, which poem-openapi's `MaybeUndefined` leaves out.
#[derive(Debug, Default)]
pub struct Clearable<T>(pub MaybeUndefined<T>);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Clearable<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        MaybeUndefined::deserialize(deserializer).map(Self)
    }
}

impl<T: Type> Type for Clearable<T> {
    const IS_REQUIRED: bool = false;
    type RawValueType = T::RawValueType;
    type RawElementValueType = T::RawElementValueType;

    fn name() -> Cow<'static, str> {
        format!("clearable_{}", T::name()).into()
    }

    fn schema_ref() -> MetaSchemaRef {
        Nullable::<T>::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        self.0.value().and_then(|v| v.as_raw_value())
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        match self.0.value() {
            Some(v) => v.raw_element_iter(),
            None => Box::new(std::iter::empty()),
        }
    }
}

impl<T: ParseFromJSON> ParseFromJSON for Clearable<T> {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        MaybeUndefined::<T>::parse_from_json(value)
            .map(Self)
            .map_err(ParseError::propagate)
    }
}

impl<T: ToJSON> ToJSON for Clearable<T> {
    fn to_json(&self) -> Option<Value> {
        self.0.to_json()
    }
}

impl<T> From<Clearable<T>> for Patch<T> {
    fn from(value: Clearable<T>) -> Self {
        value.0.into()
    }
}
