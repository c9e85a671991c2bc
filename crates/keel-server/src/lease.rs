//! [`Leases`]: one run per thread across server processes. Within a process the run
//! manager's per-thread queue is enough; processes sharing a PostgreSQL database also
//! take a session-level advisory lock on the thread (`pg_advisory_lock`) for the whole
//! run, so a thread is never run by two processes at once. A process that dies loses its
//! connection, and PostgreSQL releases its locks with it.

use crate::registry::RegistryError;

/// Where thread leases are taken.
#[derive(Clone, Debug)]
pub enum Leases {
    /// One process: the run manager's queue serialises runs.
    Local,
    /// Advisory locks in a PostgreSQL database shared with other processes.
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
}

/// A held lease; give it back with [`Lease::release`]. Dropped without release (a
/// cancelled task), its connection is closed, which releases the lock too.
#[derive(Debug)]
pub struct Lease {
    #[cfg(feature = "postgres")]
    conn: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    #[cfg(feature = "postgres")]
    key: i64,
}

/// A stable 64-bit key for a thread id (FNV-1a, [`keel_core::hash`]), the same in every
/// process and release.
#[cfg(any(feature = "postgres", test))]
pub(crate) fn lock_key(thread_id: &str) -> i64 {
    let hash = keel_core::hash::fnv1a(thread_id.as_bytes());
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// Connections the PostgreSQL leases may hold: each run executing or waiting for its
/// thread holds one, apart from the store's pool, so waiters never starve the writes of
/// the run they wait for.
#[cfg(feature = "postgres")]
pub const LEASE_CONNECTIONS: u32 = 64;

impl Leases {
    /// Leases in the PostgreSQL database at `url`, on a pool of their own.
    #[cfg(feature = "postgres")]
    pub async fn postgres(url: &str) -> Result<Leases, RegistryError> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(LEASE_CONNECTIONS)
            .connect(url)
            .await
            .map_err(RegistryError::new)?;
        Ok(Leases::Postgres(pool))
    }

    /// Waits until this process may run the thread.
    pub(crate) async fn acquire(&self, thread_id: &str) -> Result<Lease, RegistryError> {
        match self {
            Leases::Local => {
                let _ = thread_id;
                Ok(Lease {
                    #[cfg(feature = "postgres")]
                    conn: None,
                    #[cfg(feature = "postgres")]
                    key: 0,
                })
            }
            #[cfg(feature = "postgres")]
            Leases::Postgres(pool) => {
                let key = lock_key(thread_id);
                let mut conn = pool.acquire().await.map_err(RegistryError::new)?;
                sqlx::query("SELECT pg_advisory_lock($1)")
                    .bind(key)
                    .execute(&mut *conn)
                    .await
                    .map_err(RegistryError::new)?;
                Ok(Lease {
                    conn: Some(conn),
                    key,
                })
            }
        }
    }
}

impl Leases {
    /// True when another process holds the thread's lease right now (always false for
    /// one process, whose run manager knows its own runs).
    pub(crate) async fn held_elsewhere(&self, thread_id: &str) -> Result<bool, RegistryError> {
        match self {
            Leases::Local => {
                let _ = thread_id;
                Ok(false)
            }
            #[cfg(feature = "postgres")]
            Leases::Postgres(pool) => {
                let key = lock_key(thread_id);
                let mut conn = pool.acquire().await.map_err(RegistryError::new)?;
                let (free,): (bool,) = sqlx::query_as("SELECT pg_try_advisory_lock($1)")
                    .bind(key)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(RegistryError::new)?;
                if free {
                    sqlx::query("SELECT pg_advisory_unlock($1)")
                        .bind(key)
                        .execute(&mut *conn)
                        .await
                        .map_err(RegistryError::new)?;
                }
                Ok(!free)
            }
        }
    }
}

impl Lease {
    /// Gives the lease back.
    pub(crate) async fn release(mut self) {
        #[cfg(feature = "postgres")]
        if let Some(mut conn) = self.conn.take() {
            let unlocked = sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(self.key)
                .execute(&mut *conn)
                .await;
            if unlocked.is_err() {
                // Closing the session releases the lock.
                drop(conn.detach());
            }
        }
        #[cfg(not(feature = "postgres"))]
        let _ = &mut self;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        #[cfg(feature = "postgres")]
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_stable_and_spread() {
        assert_eq!(lock_key("thread-1"), lock_key("thread-1"));
        assert_ne!(lock_key("thread-1"), lock_key("thread-2"));
        // FNV-1a of the empty string is its offset basis.
        assert_eq!(lock_key(""), 0xcbf2_9ce4_8422_2325_u64 as i64);
        // Advisory-lock keys shared by processes of different releases: pinned.
        assert_eq!(lock_key("thread-1"), 3214755371066863583);
        assert_eq!(
            lock_key("00000000-0000-0000-0000-000000000000"),
            8950988243607919089
        );
    }
}
