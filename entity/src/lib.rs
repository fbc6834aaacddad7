//! sea-orm entities, one file per table. No logic lives here: the service's domain modules
//! own behaviour and the API has its own DTO types named after the spec's resources. Status
//! columns are typed: each has an enum made by `status_enum!`, next to its table's model.

/// What code generic over a status column needs of its enum (made by `status_enum!`).
pub trait StatusEnum: Copy + Eq + 'static {
    /// Every status, in the order lists and messages name them.
    const ALL: &'static [Self];

    /// The stored form.
    fn as_str(self) -> &'static str;

    /// The status a stored string names (exact).
    fn parse(text: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|s| s.as_str() == text)
    }

    /// Every stored form, in the order of `ALL` (for "must be one of" messages).
    fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|s| s.as_str()).collect()
    }
}

/// A status column's enum. Each stored string is written once: sea-orm reads and writes the
/// column through it (`DeriveActiveEnum` over the existing string column, so the schema and the
/// stored strings stay as they were), and code that needs the string itself (JSON, logs, raw SQL,
/// messages) takes it from `as_str`.
macro_rules! status_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $($(#[$variant_meta:meta])* $variant:ident = $stored:tt,)+
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, sea_orm::EnumIter, sea_orm::DeriveActiveEnum,
        )]
        #[sea_orm(rs_type = "String", db_type = "String(sea_orm::sea_query::StringLen::None)")]
        pub enum $name {
            $($(#[$variant_meta])* #[sea_orm(string_value = $stored)] $variant,)+
        }

        impl $name {
            /// Every status, in declaration order (the order lists and messages name them).
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The stored form.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $stored,)+
                }
            }

            /// The status a stored string names (exact).
            pub fn parse(text: &str) -> Option<Self> {
                <Self as $crate::StatusEnum>::parse(text)
            }
        }

        impl $crate::StatusEnum for $name {
            const ALL: &'static [Self] = $name::ALL;

            fn as_str(self) -> &'static str {
                $name::as_str(self)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod agent;
pub mod agent_run;
pub mod api_key;
pub mod api_usage;
pub mod audit_entry;
pub mod automation;
pub mod automation_destination;
pub mod automation_run;
pub mod automation_signal;
pub mod billing_change;
pub mod change;
pub mod connect_session;
pub mod customer;
pub mod customer_event_hour;
pub mod destination;
pub mod engagement_session;
pub mod event;
pub mod fact;
pub mod integration_connection;
pub mod job;
pub mod notification_delivery;
pub mod organization;
pub mod query_session;
pub mod signal;
pub mod signal_hit;
pub mod source;
pub mod sync_run;
pub mod tracking_config;
pub mod tracking_domain;
pub mod user;
pub mod visitor;
pub mod workspace_user;

#[cfg(test)]
mod tests {
    use super::{
        customer::BillingStatus, fact::FactStatus, notification_delivery::DeliveryStatus,
        StatusEnum,
    };

    // Statuses that are also a wire form spell it through serde: it must be the stored one.
    fn written_as_stored<S: StatusEnum + serde::Serialize + std::fmt::Debug>() {
        for status in S::ALL {
            let written = serde_json::to_value(status).unwrap();
            assert_eq!(written, status.as_str(), "{status:?}");
        }
    }

    fn read_from_stored<S: StatusEnum + serde::de::DeserializeOwned + std::fmt::Debug>() {
        for status in S::ALL {
            let sent = serde_json::Value::from(status.as_str());
            assert_eq!(serde_json::from_value::<S>(sent).unwrap(), *status);
        }
    }

    #[test]
    fn wire_forms_are_the_stored_strings() {
        written_as_stored::<BillingStatus>();
        written_as_stored::<FactStatus>();
        written_as_stored::<DeliveryStatus>();
        read_from_stored::<BillingStatus>();
        read_from_stored::<FactStatus>();
    }
}
