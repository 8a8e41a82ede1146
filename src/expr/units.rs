//! Units of measure of an expression: a check that catches formulas a type checker would,
//! such as `returns - adv60` (a return less a dollar volume) or `close > volume`.
//!
//! Why: small LLM writers produce such sums often, and they do run: the backtest scores
//! them like any other signal, and now and then one clears the bar by chance. A quant
//! would not keep one. The mining loop's rule checks reject them before a backtest
//! (`[mine] check_units`), with a message the writer can act on; `eval` warns.
//!
//! Two base dimensions: dollars and shares. A price is dollars per share, `volume` shares,
//! `adv{d}` and `cap` dollars (conventions.md: `adv{d}` is the mean of close × volume),
//! `returns` is a pure number. A constant takes whatever unit its context needs (`close +
//! 0.01`, `volume > 1e6`, `-1 * x`), and so does a column of the user's data the checker
//! does not know, or another alpha (`alpha:ID`). Each operator's rule is its catalogue
//! entry's [`Units`].

use super::ast::{Expr, ExprKind};
use super::error::ExprError;
use super::ops::{self, of_field, Param, Unit, Units, NUMBER};

/// A constant's value, where the tree is a number or a negated one.
fn constant(e: &Expr) -> Option<f64> {
    match &e.kind {
        ExprKind::Num(v) => Some(*v),
        ExprKind::Neg(a) => constant(a).map(|v| -v),
        _ => None,
    }
}

/// The unit of `e` (parsed from `text`), or an error at the first place where it mixes
/// units that cannot be mixed. Errors of other kinds (an unknown operator, a wrong
/// number of arguments) are the compiler's: this passes over them.
pub fn check(e: &Expr, text: &str) -> Result<Unit, ExprError> {
    let (name, args): (String, Vec<&Expr>) = match &e.kind {
        ExprKind::Num(_) | ExprKind::AlphaRef(_) => return Ok(Unit::Free),
        ExprKind::Ident(n) => return Ok(of_field(n)),
        ExprKind::Neg(a) => return check(a, text),
        ExprKind::Ternary(c, a, b) => ("where".into(), vec![c, a, b]),
        ExprKind::Binary(op, a, b) => (op.op_name().into(), vec![a, b]),
        ExprKind::Call { name, args, .. } => {
            let lname = name.to_ascii_lowercase();
            // As the compiler: a constant second argument makes min/max the window form.
            let window = args.get(1).is_some_and(Expr::reads_no_data);
            let name = match lname.as_str() {
                "min" if window => "ts_min".into(),
                "max" if window => "ts_max".into(),
                "min" => "min2".into(),
                "max" => "max2".into(),
                _ => lname,
            };
            (name, args.iter().collect())
        }
    };
    let Some(def) = ops::lookup(&name) else { return Ok(Unit::Free) };
    let (mut units, mut consts) = (Vec::new(), Vec::new());
    for (a, p) in args.into_iter().zip(def.params) {
        match p {
            Param::Series | Param::Optional(_) => {
                units.push(check(a, text)?);
                consts.push(constant(a));
            }
            Param::Window => consts.push(constant(a)),
            Param::Group | Param::Level => {}
        }
    }
    apply(def.units, def.name, &units, &consts).map_err(|what| {
        ExprError::at(text, e.span, what).with_hint("scale one side first (divide it by something in the same unit, or rank it), or compare like with like")
    })
}

/// Where a formula mixes units; None when its units agree, and when it does not parse
/// (the parser's error is the compiler's to report).
pub fn mixed(text: &str) -> Option<ExprError> {
    super::parse(text).ok().and_then(|e| check(&e, text).err())
}

/// One operator's rule on its series arguments' units `u`; `consts` holds the constant
/// value (if any) of each series or window argument, in order. The error says what was
/// mixed.
fn apply(rule: Units, name: &str, u: &[Unit], consts: &[Option<f64>]) -> Result<Unit, String> {
    // The unit the arguments from `from` on share, or what mixes.
    let all_same = |from: usize| -> Result<Unit, String> {
        let mut acc = Unit::Free;
        for &x in u.iter().skip(from) {
            if !acc.same(x) {
                let (a, b) = (acc.describe(), x.describe());
                return Err(match name {
                    "add" => format!("adds {b} to {a}"),
                    "sub" => format!("subtracts {b} from {a}"),
                    "where" => format!("the two branches of this condition are {a} and {b}"),
                    "lt" | "gt" | "le" | "ge" | "eq" | "ne" => format!("compares {a} with {b}"),
                    // The two-series min and max, as the user calls them.
                    _ => format!("{} mixes {a} and {b}", name.trim_end_matches('2')),
                });
            }
            acc = acc.or(x);
        }
        Ok(acc)
    };
    let arg = |i: usize| u.get(i).copied().unwrap_or(Unit::Free);
    // An exponent or a window: the second argument.
    let second = consts.get(1).copied().flatten();
    Ok(match rule {
        Units::Same => all_same(0)?,
        Units::Compare => all_same(0).map(|_| NUMBER)?,
        Units::Number => NUMBER,
        Units::Branches => all_same(1)?,
        Units::Product => arg(0).times(arg(1), 1.0),
        Units::Quotient => arg(0).times(arg(1), -1.0),
        Units::Power => match (arg(0), second) {
            (b, Some(p)) => b.pow(p),
            (Unit::Free, None) => Unit::Free,
            (b, None) if b.same(NUMBER) => NUMBER,
            (b, None) => return Err(format!("raises {} to a power that varies, which leaves no unit", b.describe())),
        },
        Units::Root => arg(0).pow(0.5),
        Units::WindowPower => match second {
            Some(d) if d >= 1.0 => arg(0).pow(d.floor()),
            _ => Unit::Free,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::ops::{DOLLARS, PRICE};
    use crate::expr::parse;

    fn unit(text: &str) -> Result<Unit, String> {
        check(&parse(text).map_err(|e| e.to_string())?, text).map_err(|e| e.to_string())
    }

    #[test]
    fn fields_and_arithmetic() {
        assert_eq!(unit("close"), Ok(PRICE));
        assert_eq!(unit("adv20 / volume"), Ok(PRICE));
        assert_eq!(unit("close * volume"), Ok(DOLLARS));
        assert_eq!(unit("1 / close"), Ok(Unit::Dim(-1.0, 1.0)));
        assert_eq!(unit("((high * low)^0.5) - vwap"), Ok(PRICE));
        assert_eq!(unit("sqrt(high * low)"), Ok(PRICE));
        assert_eq!(unit("ts_product(close, 3)"), Ok(Unit::Dim(3.0, -3.0)));
        assert_eq!(unit("covariance(close, volume, 5)"), Ok(DOLLARS));
        assert_eq!(unit("close / delay(close, 1) - 1"), Ok(NUMBER));
        assert_eq!(unit("rank(close) + returns"), Ok(NUMBER));
        assert_eq!(unit("-1 * close + 0.01"), Ok(PRICE));
        assert_eq!(unit("min(close, 5) - max(open, vwap)"), Ok(PRICE));
        assert_eq!(unit("pe_ratio + close"), Ok(PRICE), "an unknown column takes any unit");
        assert_eq!(unit("alpha:x * close"), Ok(PRICE));
        assert_eq!(unit("(close > open) ? high : low"), Ok(PRICE));
        assert_eq!(unit("rank(close)^rank(volume)"), Ok(NUMBER));
        assert_eq!(unit("indneutralize(close - open, IndClass.sector)"), Ok(PRICE));
    }

    #[test]
    fn mixed_units_are_errors_at_their_position() {
        let text = "rank(returns - adv60)";
        let err = check(&parse(text).expect("parses"), text).expect_err("mixes");
        assert_eq!((err.fragment(60).as_str(), err.fragment(5).as_str()), ("returns - adv60", "retu…"));
        for (text, says) in [
            ("rank(returns - adv60)", "subtracts a dollar amount from a pure number at 6"),
            ("close > volume", "compares a price with a volume in shares at 1"),
            ("correlation(close, open, 5) + high", "adds a price to a pure number"),
            ("(returns < 0) ? close : volume", "branches of this condition are a price and a volume in shares"),
            ("min(close, volume)", "min mixes a price and a volume in shares"),
            ("close ^ returns", "raises a price to a power that varies"),
            ("rank(close * close - close)", "subtracts a price from a quantity in dollars^2·shares^-2"),
        ] {
            let e = unit(text).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}

