//! The PostgreSQL server `./x test` starts for the tests
//! (`TETHER_TEST_POSTGRES_URL`), and a schema of a test's own on it.

/// The test server's URL.
///
/// # Panics
/// If `TETHER_TEST_POSTGRES_URL` is not set, saying how to set it.
pub fn server_url() -> String {
    std::env::var("TETHER_TEST_POSTGRES_URL").unwrap_or_else(|_| {
        panic!(
            "TETHER_TEST_POSTGRES_URL is not set: run the tests via `./x test`, which starts PostgreSQL \
             (or run `eval \"$(tools/services/postgres.sh start)\"` first)"
        )
    })
}

/// A schema name no other test of any process uses: `<prefix>_<pid>_<n>`.
pub fn unique_schema(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!("{prefix}_{}_{}", std::process::id(), NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// The SQL that makes `schema` new and empty and the session's own.
pub fn fresh_schema_sql(schema: &str) -> String {
    format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; SET search_path TO {schema}")
}

/// `base` with every session it opens in `schema`: the audit store URL of
/// a test's own tables.
pub fn schema_url(base: &str, schema: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}options=-csearch_path%3D{schema}")
}
