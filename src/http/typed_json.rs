//! Request body types poem-openapi has no derive for:
//! - [`ContractJson`]: a JSON field whose schema is one of the engine's contracts
//!   ([`crate::engine::contract`]); the description shows that schema as a component, the
//!   field stays raw JSON for the engine to read.
//! - [`tagged_body!`]: a body whose shape depends on one of its properties (`triggerType`,
//!   `type`), described as `oneOf` with a `discriminator`, each member an object that names
//!   its tag among its own properties (so no member needs an `allOf`, and unknown keys are
//!   refused member by member).

use std::{borrow::Cow, marker::PhantomData};

use poem_openapi::{
    registry::{MetaSchema, MetaSchemaRef, Registry},
    types::{ParseFromJSON, ParseResult, ToJSON, Type},
};
use serde_json::Value;

/// Names the description component of an engine contract.
pub trait ContractName: Send + Sync + 'static {
    const NAME: &'static str;
}

macro_rules! contract_names {
    ($($marker:ident => $name:literal),+ $(,)?) => {$(
        #[doc = concat!("The `", $name, "` contract.")]
        pub enum $marker {}
        impl ContractName for $marker {
            const NAME: &'static str = $name;
        }
    )+};
}

contract_names! {
    EventMatchDefinitionJson => "EventMatchDefinition",
    SignalOccurrenceTriggerJson => "SignalOccurrenceTrigger",
    AtLeastSignalOccurrenceTriggerJson => "AtLeastSignalOccurrenceTrigger",
    ScheduleTriggerJson => "ScheduleTrigger",
    AudienceFilterJson => "AudienceFilter",
}

/// Raw JSON described by the engine contract `N`.
pub struct ContractJson<N>(pub Value, PhantomData<N>);

impl<N> std::fmt::Debug for ContractJson<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<N> From<ContractJson<N>> for Value {
    fn from(json: ContractJson<N>) -> Self {
        json.0
    }
}

impl<'de, N> serde::Deserialize<'de> for ContractJson<N> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(|v| Self(v, PhantomData))
    }
}

impl<N: ContractName> Type for ContractJson<N> {
    const IS_REQUIRED: bool = true;
    type RawValueType = Value;
    type RawElementValueType = Value;

    fn name() -> Cow<'static, str> {
        N::NAME.into()
    }

    fn schema_ref() -> MetaSchemaRef {
        // The component itself is added to the description from the contract's JSON Schema.
        MetaSchemaRef::Reference(N::NAME.to_string())
    }

    fn register(registry: &mut Registry) {
        // A placeholder: [`add_contract_components`] puts the contract's schema in its place.
        registry
            .schemas
            .entry(N::NAME.to_string())
            .or_insert_with(|| MetaSchema::new("object"));
    }

    fn as_raw_value(&self) -> Option<&Value> {
        Some(&self.0)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Value> + 'a> {
        Box::new(std::iter::once(&self.0))
    }
}

impl<N: ContractName> ParseFromJSON for ContractJson<N> {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        Ok(Self(value.unwrap_or_default(), PhantomData))
    }
}

impl<N: ContractName> ToJSON for ContractJson<N> {
    fn to_json(&self) -> Option<Value> {
        Some(self.0.clone())
    }
}

/// Registers a tagged body: each member's schema gains the tag property (its value,
/// required) and the body is `oneOf` the members with a `discriminator`. A member may itself be
/// `oneOf` other objects (its members then gain the tag).
pub fn register_tagged(
    registry: &mut Registry,
    name: &'static str,
    description: &'static str,
    tag: &'static str,
    members: &[(&'static str, String)],
) {
    for (value, member) in members {
        add_tag(registry, member, tag, &[Value::from(*value)]);
    }
    registry.schemas.insert(
        name.to_string(),
        MetaSchema {
            description: Some(description),
            one_of: references(members.iter().map(|(_, m)| m)),
            discriminator: Some(poem_openapi::registry::MetaDiscriminatorObject {
                property_name: tag,
                mapping: members
                    .iter()
                    .map(|(v, m)| (v.to_string(), format!("#/components/schemas/{m}")))
                    .collect(),
            }),
            ..MetaSchema::ANY
        },
    );
}

/// Gives a member (or, for a member that is itself `oneOf`, each of its members) the required
/// tag property with its values, unless it declares the property itself.
fn add_tag(registry: &mut Registry, member: &str, tag: &'static str, values: &[Value]) {
    let Some(schema) = registry.schemas.get_mut(member) else {
        return;
    };
    if !schema.one_of.is_empty() {
        let inner: Vec<String> = schema
            .one_of
            .iter()
            .filter_map(|r| match r {
                MetaSchemaRef::Reference(name) => Some(name.clone()),
                MetaSchemaRef::Inline(_) => None,
            })
            .collect();
        for name in inner {
            add_tag(registry, &name, tag, values);
        }
        return;
    }
    if schema.properties.iter().any(|(p, _)| *p == tag) {
        return;
    }
    schema.properties.insert(
        0,
        (
            tag,
            MetaSchemaRef::Inline(Box::new(MetaSchema {
                enum_items: values.to_vec(),
                ..MetaSchema::new("string")
            })),
        ),
    );
    schema.required.insert(0, tag);
}

/// Registers a body that is exactly one of its members, told apart by values of a property
/// each member declares with its own `enum` (`matchMode`): `oneOf` without a `discriminator`,
/// whose mapping would send each value to one member (a member here stands for several).
pub fn register_one_of(
    registry: &mut Registry,
    name: &'static str,
    description: &'static str,
    members: &[String],
) {
    let schema = MetaSchema {
        one_of: references(members),
        ..MetaSchema::ANY
    };
    register_described(registry, name, description, schema);
}

/// Registers a body of alternative shapes told apart by the keys they require (each refuses
/// the others' keys): `anyOf` the members.
pub fn register_alternatives(
    registry: &mut Registry,
    name: &'static str,
    description: &'static str,
    members: &[String],
) {
    let schema = MetaSchema {
        any_of: references(members),
        ..MetaSchema::ANY
    };
    register_described(registry, name, description, schema);
}

fn references<'a>(members: impl IntoIterator<Item = &'a String>) -> Vec<MetaSchemaRef> {
    members
        .into_iter()
        .map(|m| MetaSchemaRef::Reference(m.clone()))
        .collect()
}

fn register_described(
    registry: &mut Registry,
    name: &'static str,
    description: &'static str,
    schema: MetaSchema,
) {
    registry.schemas.insert(
        name.to_string(),
        MetaSchema {
            description: Some(description),
            ..schema
        },
    );
}

/// The poem-openapi `Type` of a body made of other objects: described by reference, registered
/// by `$register` (a closure over the registry) after its members.
#[macro_export]
macro_rules! body_of_members {
    ($ty:ident, [$($member:ty),+], $register:expr) => {
        impl poem_openapi::types::Type for $ty {
            const IS_REQUIRED: bool = true;
            type RawValueType = Self;
            type RawElementValueType = Self;

            fn name() -> std::borrow::Cow<'static, str> {
                stringify!($ty).into()
            }

            fn schema_ref() -> poem_openapi::registry::MetaSchemaRef {
                poem_openapi::registry::MetaSchemaRef::Reference(stringify!($ty).to_string())
            }

            fn register(registry: &mut poem_openapi::registry::Registry) {
                $(<$member as poem_openapi::types::Type>::register(registry);)+
                let register: fn(&mut poem_openapi::registry::Registry) = $register;
                register(registry);
            }

            fn as_raw_value(&self) -> Option<&Self> {
                Some(self)
            }

            fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
                Box::new(std::iter::once(self))
            }
        }
    };
}

/// Describes a serde-untagged enum of poem-openapi objects as `anyOf` its members:
/// `alternative_body!(AutomationTestRequest, "doc", [AutomationTestByEvent, AutomationTestBySubject])`.
#[macro_export]
macro_rules! alternative_body {
    ($ty:ident, $doc:literal, [$($member:ty),+ $(,)?]) => {
        $crate::body_of_members!($ty, [$($member),+], |registry| {
            let members = [$(<$member as poem_openapi::types::Type>::name().into_owned()),+];
            $crate::http::typed_json::register_alternatives(registry, stringify!($ty), $doc, &members);
        });
    };
}

/// Describes a serde-tagged enum of poem-openapi objects as a discriminated `oneOf`:
/// `tagged_body!(AutomationCreate, "doc", "triggerType", { "SCHEDULE" => Schedule(ScheduleAutomationCreate), ... })`.
/// The enum itself (with `#[serde(tag = ...)]`) is declared beside it; parsing is serde's, after
/// the body was checked against this description.
#[macro_export]
macro_rules! tagged_body {
    ($ty:ident, $doc:literal, $tag:literal, { $($value:literal => $variant:ident($member:ty)),+ $(,)? }) => {
        $crate::body_of_members!($ty, [$($member),+], |registry| {
            let members = [$(($value, <$member as poem_openapi::types::Type>::name().into_owned())),+];
            $crate::http::typed_json::register_tagged(registry, stringify!($ty), $doc, $tag, &members);
        });
    };
}

/// Adds the engine's contracts to a generated description as components, in OpenAPI 3.0 form,
/// with the types they are made of (`Grain`, `PropertyCondition`, ...) as components of their
/// own, so SDKs name them.
pub fn add_contract_components(doc: &mut Value) {
    let Some(schemas) = doc
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let steps = crate::integrations::setup::step_contracts()
        .into_iter()
        .map(|(_, name, contract)| (name, contract));
    for (name, contract) in crate::engine::contract::components()
        .into_iter()
        .chain(steps)
    {
        let mut root = contract.schema().clone();
        let defs = root
            .as_object_mut()
            .and_then(|o| o.remove("$defs"))
            .and_then(|d| d.as_object().cloned())
            .unwrap_or_default();
        for (def_name, def) in defs {
            schemas.insert(def_name, as_component(def));
        }
        schemas.insert(name.to_string(), as_component(root));
    }
}

fn as_component(mut schema: Value) -> Value {
    point_refs_at_components(&mut schema);
    crate::tools::openapi::to_openapi_30(&schema)
}

/// `#/$defs/X` -> `#/components/schemas/X`.
fn point_refs_at_components(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match (key.as_str(), value.as_str()) {
                    ("$ref", Some(target)) => {
                        if let Some(name) = target.strip_prefix("#/$defs/") {
                            *value = Value::from(format!("#/components/schemas/{name}"));
                        }
                    }
                    _ => point_refs_at_components(value),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(point_refs_at_components),
        _ => {}
    }
}
