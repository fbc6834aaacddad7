//! The accounts and users a group's identity effects name, as stored, by (organization, key):
//! loaded up front, kept current by the group's own writes, so an `identify` costs no look-up.

use std::collections::HashMap;

use entity::{customer, user};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};

/// Rows of one table by (organization, key); `None`: no row is stored under that key.
pub(super) struct KnownRows<E: EntityTrait> {
    rows: HashMap<(String, String), Option<E::Model>>,
    org_column: E::Column,
    key_column: E::Column,
    key_of: fn(&E::Model) -> Option<&str>,
    org_of: fn(&E::Model) -> &str,
}

/// Accounts by `externalId`.
impl Default for KnownRows<customer::Entity> {
    fn default() -> Self {
        Self {
            rows: HashMap::new(),
            org_column: customer::Column::OrganizationId,
            key_column: customer::Column::ExternalId,
            key_of: |c| c.external_id.as_deref(),
            org_of: |c| &c.organization_id,
        }
    }
}

/// Users by `userId` (their `externalId`).
impl Default for KnownRows<user::Entity> {
    fn default() -> Self {
        Self {
            rows: HashMap::new(),
            org_column: user::Column::OrganizationId,
            key_column: user::Column::ExternalId,
            key_of: |u| u.external_id.as_deref(),
            org_of: |u| &u.organization_id,
        }
    }
}

impl<E: EntityTrait> KnownRows<E> {
    /// The row stored under `key`: what the group knows, else the database.
    pub(super) async fn find<C: ConnectionTrait>(
        &self,
        conn: &C,
        org: &str,
        key: &str,
    ) -> Result<Option<E::Model>, DbErr> {
        if let Some(known) = self.rows.get(&(org.to_string(), key.to_string())) {
            return Ok(known.clone());
        }
        E::find()
            .filter(self.org_column.eq(org))
            .filter(self.key_column.eq(key))
            .one(conn)
            .await
    }

    /// Records a row the group wrote (or found) as what is stored under its key.
    pub(super) fn remember(&mut self, row: E::Model) {
        if let Some(key) = (self.key_of)(&row) {
            let at = ((self.org_of)(&row).to_string(), key.to_string());
            self.rows.insert(at, Some(row));
        }
    }

    /// Loads the rows stored under `keys` in `org` (one query per chunk of keys): each key's
    /// first row (as a single-row look-up would have found it), the other keys as not stored.
    pub(super) async fn load<C: ConnectionTrait>(
        &mut self,
        conn: &C,
        org: &str,
        keys: &[&str],
    ) -> Result<(), DbErr> {
        let found = super::preload::find_in_chunks::<E, _>(
            conn,
            self.org_column,
            org,
            self.key_column,
            keys,
        )
        .await?;
        for key in keys {
            self.rows.insert((org.to_string(), key.to_string()), None);
        }
        for row in found {
            if let Some(key) = (self.key_of)(&row) {
                let slot = self
                    .rows
                    .entry((org.to_string(), key.to_string()))
                    .or_insert(None);
                if slot.is_none() {
                    *slot = Some(row);
                }
            }
        }
        Ok(())
    }

    /// Drops the group's copies `stale` names: a write that bypassed them changed those rows.
    pub(super) fn forget(&mut self, stale: impl Fn(&E::Model) -> bool) {
        self.rows
            .retain(|_, known| known.as_ref().is_none_or(|row| !stale(row)));
    }
}
