//! Statements as a test writes them on a client connection: one that must succeed, or one
//! row that must come back.

use futures::future::BoxFuture;
use mysql_async::prelude::{AsQuery, FromRow, Queryable};
use mysql_async::Conn;

/// What a test does most on a connection, in one call: a failure panics with the server's
/// error, as `unwrap` would.
pub trait Statements {
    /// Runs `sql` (one or more statements), which must succeed; the results are dropped.
    fn run<'a, Q: AsQuery + 'a>(&'a mut self, sql: Q) -> BoxFuture<'a, ()>;

    /// Runs `sql`, which must fail; returns its error.
    fn fails<'a, Q: AsQuery + 'a>(&'a mut self, sql: Q) -> BoxFuture<'a, mysql_async::Error>;

    /// The first row `sql` returns (one value, or a tuple of them), which must succeed and
    /// return a row.
    fn one<'a, T: FromRow + Send + 'static, Q: AsQuery + 'a>(
        &'a mut self,
        sql: Q,
    ) -> BoxFuture<'a, T>;
}

impl Statements for Conn {
    fn run<'a, Q: AsQuery + 'a>(&'a mut self, sql: Q) -> BoxFuture<'a, ()> {
        Box::pin(async move { self.query_drop(sql).await.unwrap() })
    }

    fn fails<'a, Q: AsQuery + 'a>(&'a mut self, sql: Q) -> BoxFuture<'a, mysql_async::Error> {
        Box::pin(async move { self.query_drop(sql).await.expect_err("the statement fails") })
    }

    fn one<'a, T: FromRow + Send + 'static, Q: AsQuery + 'a>(
        &'a mut self,
        sql: Q,
    ) -> BoxFuture<'a, T> {
        Box::pin(async move {
            self.query_first(sql)
                .await
                .unwrap()
                .expect("the query returned a row")
        })
    }
}
