//! Steps of a migration that only PostgreSQL takes (an index SQLite does not need, or cannot
//! make).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

/// Runs `statements` in order on PostgreSQL; nothing on another database.
pub async fn run<S: AsRef<str>>(
    manager: &SchemaManager<'_>,
    statements: &[S],
) -> Result<(), DbErr> {
    if manager.get_database_backend() != DbBackend::Postgres {
        return Ok(());
    }
    for sql in statements {
        manager
            .get_connection()
            .execute_unprepared(sql.as_ref())
            .await?;
    }
    Ok(())
}

/// A migration that only PostgreSQL takes: its `up` and `down` statements, each run in order
/// (see [`run`]). Named after the file it is written in, as every migration is.
#[macro_export]
macro_rules! postgres_only_migration {
    (up: [$($up:expr),* $(,)?], down: [$($down:expr),* $(,)?] $(,)?) => {
        #[derive(DeriveMigrationName)]
        pub struct Migration;

        #[async_trait::async_trait]
        impl MigrationTrait for Migration {
            async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                $crate::postgres_only::run(manager, &[$($up),*]).await
            }

            async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                $crate::postgres_only::run(manager, &[$($down),*]).await
            }
        }
    };
}
