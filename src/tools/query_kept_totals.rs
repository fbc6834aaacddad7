//! `svc_query` statements that count or sum a whole view by its kept bucket, answered from
//! the kept totals instead of every row.
//!
//! `SELECT billing_status, count(*), sum(mrr_cents) FROM customers GROUP BY billing_status`
//! reads every customer: at a million customers a few hundred ms of CPU, and with several
//! callers on a small machine it queues past the aggregate target. `customer_totals` holds
//! the same numbers per status, kept by triggers in the same transactions as the rows, so
//! such a statement is rewritten to read it: same columns, same values, same types, from one
//! row per status.
//!
//! Only statements whose answer is provably the same are rewritten: one `SELECT` from the
//! view alone (no join, subquery, CTE, `DISTINCT`, window), grouped by the bucket column or
//! not grouped at all, whose only aggregates are `count(*)`, `count(1)`, `count(id)` and the
//! sums (and averages) of the columns the totals keep, and whose every other column reference is the bucket column (or an
//! output alias). Anything else runs as written. The caller's statement is always prepared
//! as written first, so its errors and column names are its own.

use std::ops::ControlFlow;

use super::analytics_views::{quote_ident, KeptTotals, KEPT_TOTALS};

use sqlparser::{
    ast::{
        visit_expressions, visit_expressions_mut, Expr, FunctionArg, FunctionArgExpr,
        FunctionArguments, GroupByExpr, Ident, InTarget, ObjectName, ObjectNamePart, SelectItem,
        SetExpr, Statement, TableFactor, Value,
    },
    dialect::{Dialect, PostgreSqlDialect, SQLiteDialect},
    parser::Parser,
};

/// The SQL dialect a rewritten statement is written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueryDialect {
    Sqlite,
    Postgres,
}

/// Marks what the rewrite puts in place of an aggregate or the view's name, replaced in the
/// statement's text at the end; statements that contain it are not rewritten.
const PLACEHOLDER: &str = "__custintel_kept_total_";

/// The statement to run instead of `sql`, reading kept totals, when its answer is the same.
pub fn rewrite(sql: &str, dialect: QueryDialect) -> Option<String> {
    if sql.contains(PLACEHOLDER) {
        return None;
    }
    let parser_dialect: &dyn Dialect = match dialect {
        QueryDialect::Sqlite => &SQLiteDialect {},
        QueryDialect::Postgres => &PostgreSqlDialect {},
    };
    let mut statements = Parser::parse_sql(parser_dialect, sql).ok()?;
    if statements.len() != 1 {
        return None;
    }
    let Statement::Query(query) = &mut statements[0] else {
        return None;
    };
    if query.with.is_some()
        || query.settings.is_some()
        || query.fetch.is_some()
        || !query.locks.is_empty()
        || query.for_clause.is_some()
        || query.format_clause.is_some()
        || !query.pipe_operators.is_empty()
    {
        return None;
    }
    let SetExpr::Select(select) = query.body.as_mut() else {
        return None;
    };
    if select.distinct.is_some()
        || select.select_modifiers.is_some()
        || select.top.is_some()
        || select.exclude.is_some()
        || select.into.is_some()
        || !select.lateral_views.is_empty()
        || select.prewhere.is_some()
        || !select.connect_by.is_empty()
        || !select.cluster_by.is_empty()
        || !select.distribute_by.is_empty()
        || !select.sort_by.is_empty()
        || !select.named_window.is_empty()
        || select.qualify.is_some()
        || select.value_table_mode.is_some()
        || !select.optimizer_hints.is_empty()
        || select.from.len() != 1
        || !select.from[0].joins.is_empty()
    {
        return None;
    }

    // The one relation: a kept view, by its bare name, maybe with an alias.
    let (kept, qualifier) = {
        let TableFactor::Table {
            name,
            alias,
            args,
            with_hints,
            version,
            with_ordinality,
            partitions,
            json_path,
            sample,
            index_directives,
            inheritance,
        } = &mut select.from[0].relation
        else {
            return None;
        };
        if args.is_some()
            || !with_hints.is_empty()
            || version.is_some()
            || *with_ordinality
            || !partitions.is_empty()
            || json_path.is_some()
            || sample.is_some()
            || !index_directives.is_empty()
            || inheritance.is_some()
        {
            return None;
        }
        let [ObjectNamePart::Identifier(table)] = name.0.as_slice() else {
            return None;
        };
        let kept = KEPT_TOTALS.iter().find(|k| names(table, k.view))?;
        let qualifier = match alias {
            Some(alias) if alias.columns.is_empty() && alias.at.is_none() => alias.name.clone(),
            Some(_) => return None,
            None => table.clone(),
        };
        // Rendered as `<totals> AS <qualifier>` at the end, so qualified names keep working.
        *name = ObjectName::from(vec![Ident::new(format!("{PLACEHOLDER}from"))]);
        *alias = None;
        (kept, qualifier)
    };

    // Grouped by the bucket column (by name or by its position in the select list), or not
    // grouped at all.
    let grouped = match &select.group_by {
        GroupByExpr::Expressions(exprs, modifiers) if modifiers.is_empty() => {
            match exprs.as_slice() {
                [] => false,
                [expr] if is_bucket(expr, kept, &qualifier) => true,
                [Expr::Value(v)] => {
                    let Value::Number(n, _) = &v.value else {
                        return None;
                    };
                    let position: usize = n.parse().ok()?;
                    let item = select.projection.get(position.checked_sub(1)?)?;
                    match item {
                        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. }
                            if is_bucket(e, kept, &qualifier) => {}
                        _ => return None,
                    }
                    true
                }
                _ => return None,
            }
        }
        _ => return None,
    };

    let mut aliases = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(_) => {}
            SelectItem::ExprWithAlias { alias, .. } => aliases.push(alias.clone()),
            _ => return None,
        }
    }

    // Aggregates the totals answer become placeholders, each with its replacement.
    let mut replacements: Vec<String> = Vec::new();
    let _ = visit_expressions_mut(&mut statements, |expr| {
        if let Some(replacement) = kept_aggregate(expr, kept, &qualifier, dialect) {
            *expr = Expr::Identifier(Ident::new(format!("{PLACEHOLDER}{}", replacements.len())));
            replacements.push(replacement);
        }
        ControlFlow::<()>::Continue(())
    });
    if replacements.is_empty() && !grouped {
        // Not an aggregate: one row per row of the view.
        return None;
    }

    // Everything left must mean the same over the totals: literals, operators, the bucket
    // column where the statement is grouped by it, output aliases and the placeholders.
    let refused = visit_expressions(&statements, |expr| {
        let allowed = match expr {
            Expr::Identifier(ident) if ident.value.starts_with(PLACEHOLDER) => true,
            expr if is_bucket(expr, kept, &qualifier) => true,
            Expr::Identifier(ident) => aliases.iter().any(|a| same_ident(a, ident)),
            Expr::Value(_)
            | Expr::BinaryOp { .. }
            | Expr::UnaryOp { .. }
            | Expr::Nested(_)
            | Expr::IsNull(_)
            | Expr::IsNotNull(_)
            | Expr::In {
                target: InTarget::List(_),
                global: false,
                ..
            }
            | Expr::Between { .. }
            | Expr::Like { .. }
            | Expr::ILike { .. }
            | Expr::Cast { .. } => true,
            _ => false,
        };
        if allowed {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(())
        }
    });
    if refused.is_break() {
        return None;
    }
    if !grouped {
        // Without grouping, the bucket column outside an aggregate (and outside `WHERE`, which
        // filters rows) is some row's value, which the totals do not have.
        let Statement::Query(query) = &statements[0] else {
            return None;
        };
        let SetExpr::Select(select) = query.body.as_ref() else {
            return None;
        };
        let bucket = |expr: &Expr| {
            if is_bucket(expr, kept, &qualifier) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        if visit_expressions(&select.projection, bucket).is_break()
            || visit_expressions(&select.having, bucket).is_break()
            || visit_expressions(&query.order_by, bucket).is_break()
        {
            return None;
        }
    }

    let mut text = statements[0].to_string();
    text = text.replace(
        &format!("{PLACEHOLDER}from"),
        &format!("{} AS {qualifier}", kept.totals),
    );
    // Highest first, so that `..._1` is not replaced inside `..._10`.
    for (i, replacement) in replacements.iter().enumerate().rev() {
        text = text.replace(&format!("{PLACEHOLDER}{i}"), replacement);
    }
    Some(text)
}

/// Whether `ident` names `name` (unquoted: in any case; quoted: exactly).
fn names(ident: &Ident, name: &str) -> bool {
    match ident.quote_style {
        None => ident.value.eq_ignore_ascii_case(name),
        Some('"') => ident.value == name,
        Some(_) => false,
    }
}

fn same_ident(a: &Ident, b: &Ident) -> bool {
    match (a.quote_style, b.quote_style) {
        (None, None) => a.value.eq_ignore_ascii_case(&b.value),
        _ => a.value == b.value,
    }
}

/// Whether `expr` is a reference to the view's column `column` (bare or qualified).
fn is_column(expr: &Expr, column: &str, qualifier: &Ident) -> bool {
    match expr {
        Expr::Identifier(ident) => names(ident, column),
        Expr::CompoundIdentifier(parts) => match parts.as_slice() {
            [q, c] => same_ident(q, qualifier) && names(c, column),
            _ => false,
        },
        _ => false,
    }
}

fn is_bucket(expr: &Expr, kept: &KeptTotals, qualifier: &Ident) -> bool {
    is_column(expr, kept.bucket, qualifier)
}

/// The totals' expression for an aggregate they keep: a count of the view's rows or a sum of
/// a kept column, with the type the aggregate has over the view.
fn kept_aggregate(
    expr: &Expr,
    kept: &KeptTotals,
    qualifier: &Ident,
    dialect: QueryDialect,
) -> Option<String> {
    let Expr::Function(f) = expr else {
        return None;
    };
    if f.uses_odbc_syntax
        || !matches!(f.parameters, FunctionArguments::None)
        || f.filter.is_some()
        || f.null_treatment.is_some()
        || f.over.is_some()
        || !f.within_group.is_empty()
    {
        return None;
    }
    let [ObjectNamePart::Identifier(name)] = f.name.0.as_slice() else {
        return None;
    };
    if name.quote_style.is_some() {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else {
        return None;
    };
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    let [FunctionArg::Unnamed(arg)] = list.args.as_slice() else {
        return None;
    };
    let function = name.value.to_ascii_lowercase();
    let totals_column = |column: &str| format!("{qualifier}.{}", quote_ident(column));
    match (function.as_str(), arg) {
        ("count", FunctionArgExpr::Wildcard) => {}
        ("count", FunctionArgExpr::Expr(Expr::Value(v))) if matches!(&v.value, Value::Number(n, _) if n == "1") =>
            {}
        // `id` is never null.
        ("count", FunctionArgExpr::Expr(e)) if is_column(e, "id", qualifier) => {}
        ("sum", FunctionArgExpr::Expr(e)) => {
            let column = kept.sums.iter().find(|c| is_column(e, c, qualifier))?;
            let sum = format!("SUM({})", totals_column(column));
            // PostgreSQL sums a bigint column as numeric; SQLite sums integers as integer.
            return Some(match dialect {
                QueryDialect::Sqlite => sum,
                QueryDialect::Postgres => format!("CAST({sum} AS NUMERIC)"),
            });
        }
        ("avg", FunctionArgExpr::Expr(e)) => {
            let column = kept.sums.iter().find(|c| is_column(e, c, qualifier))?;
            let (sum, count) = (
                format!("SUM({})", totals_column(column)),
                format!("SUM({})", totals_column(kept.count)),
            );
            // Each database's average of integers is their sum divided by their count: a
            // double on SQLite, a numeric division on PostgreSQL (null over no rows).
            return Some(match dialect {
                QueryDialect::Sqlite => format!("(CAST({sum} AS REAL) / {count})"),
                QueryDialect::Postgres => {
                    format!("(CAST({sum} AS NUMERIC) / CAST({count} AS NUMERIC))")
                }
            });
        }
        _ => return None,
    }
    // A count is never null (0 over no rows) and is a bigint on PostgreSQL.
    let count = format!("COALESCE(SUM({}), 0)", totals_column(kept.count));
    Some(match dialect {
        QueryDialect::Sqlite => count,
        QueryDialect::Postgres => format!("CAST({count} AS BIGINT)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(sql: &str) -> (Option<String>, Option<String>) {
        (
            rewrite(sql, QueryDialect::Sqlite),
            rewrite(sql, QueryDialect::Postgres),
        )
    }

    #[test]
    fn counts_and_sums_by_status_read_the_totals() {
        let (sqlite, postgres) = both(
            "SELECT billing_status, count(*) AS customers, sum(mrr_cents) AS mrr \
             FROM customers GROUP BY billing_status ORDER BY mrr DESC",
        );
        assert_eq!(
            sqlite.as_deref(),
            Some(
                "SELECT billing_status, COALESCE(SUM(customers.\"customers\"), 0) AS customers, \
                 SUM(customers.\"mrr_cents\") AS mrr FROM customer_totals AS customers \
                 GROUP BY billing_status ORDER BY mrr DESC"
            )
        );
        assert_eq!(
            postgres.as_deref(),
            Some(
                "SELECT billing_status, CAST(COALESCE(SUM(customers.\"customers\"), 0) AS BIGINT) \
                 AS customers, CAST(SUM(customers.\"mrr_cents\") AS NUMERIC) AS mrr \
                 FROM customer_totals AS customers GROUP BY billing_status ORDER BY mrr DESC"
            )
        );
    }

    #[test]
    fn shapes_that_keep_their_meaning_are_rewritten() {
        for sql in [
            "SELECT count(*) FROM customers",
            "select COUNT(1), Sum(MRR_CENTS) from Customers where billing_status in ('PAYING', 'TRIALING')",
            "SELECT c.billing_status, count(c.id) FROM customers AS c GROUP BY 1 HAVING count(*) > 2",
            "SELECT stage, count(*) n FROM users GROUP BY stage ORDER BY n DESC, 1 LIMIT 3",
            "SELECT count(*) * 100 / 7, billing_status FROM customers WHERE billing_status <> 'NONE' GROUP BY billing_status",
            "SELECT sum(mrr_cents) / 100.0, avg(mrr_cents) FROM customers",
            "SELECT c.billing_status AS status, COUNT(1) AS n, AVG(c.mrr_cents) / 100.0 AS a \
             FROM customers c WHERE c.billing_status IN ('PAYING', 'TRIALING', 'CHURNED') \
             GROUP BY 1 HAVING COUNT(*) > 0 ORDER BY n DESC",
        ] {
            let (sqlite, postgres) = both(sql);
            assert!(sqlite.is_some() && postgres.is_some(), "{sql}");
        }
    }

    #[test]
    fn shapes_whose_answer_could_differ_run_as_written() {
        for sql in [
            "SELECT billing_status FROM customers",
            "SELECT billing_status, count(*) FROM customers",
            "SELECT 1 FROM customers",
            "SELECT count(*) FROM customers WHERE mrr_cents > 0",
            "SELECT count(DISTINCT billing_status) FROM customers",
            "SELECT count(*) FILTER (WHERE mrr_cents > 0) FROM customers",
            "SELECT avg(mrr_cents + 1) FROM customers",
            "SELECT max(mrr_cents), billing_status FROM customers GROUP BY billing_status",
            "SELECT count(name) FROM customers",
            "SELECT count(*) OVER () FROM customers",
            "SELECT name, count(*) FROM customers GROUP BY name",
            "SELECT count(*) FROM customers GROUP BY billing_status, name",
            "SELECT count(*) FROM customers, users",
            "SELECT count(*) FROM customers JOIN users ON users.customer_id = customers.id",
            "WITH customers AS (SELECT 1) SELECT count(*) FROM customers",
            "SELECT count(*) FROM customers UNION ALL SELECT count(*) FROM users",
            "SELECT DISTINCT count(*) FROM customers",
            "SELECT count(*) FROM facts",
            "SELECT count(*) FROM main.customers",
            "SELECT count(*) FROM customers WHERE billing_status IN (SELECT stage FROM users)",
            "SELECT count(*) FROM customers WHERE billing_status IN users",
            "SELECT sum(customers.mrr_cents) FROM customers AS c",
            "SELECT count(*) FROM customers; SELECT 1",
            "SELECT count(*) AS __custintel_kept_total_0 FROM customers",
            "DELETE FROM customers",
            "SELECT count(*) FROM customers GROUP BY 2",
            "SELECT lower(billing_status), count(*) FROM customers GROUP BY billing_status",
        ] {
            assert_eq!(both(sql), (None, None), "{sql}");
        }
    }
}
