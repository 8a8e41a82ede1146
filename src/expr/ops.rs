//! The operator catalogue: every operator of the expression language, its arguments, its
//! exact meaning and its kernel, in one place. Adding an operator means adding one entry
//! to [`CATALOGUE`]. Prompts and `alphaloop ops` are generated from this table, so the
//! documentation can never drift from the code.
//!
//! Semantics follow `conventions.md`; NaN in gives NaN out unless stated; no operator ever
//! returns ±inf (it becomes NaN).

use super::kernels::cross;
use super::kernels::elementwise::{map1, map2, map2_runs, map3};
use super::kernels::pow;
use super::kernels::rolling::{self, Extreme};
use super::kernels::{Src, Value};
use crate::data::{Groups, Panel};
use std::sync::Arc;

/// What an argument must be.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Param {
    /// Any series or number.
    Series,
    /// A series or number that may be omitted (then it takes the default).
    Optional(f64),
    /// A positive constant number of days; fractions are floored.
    Window,
    /// A group classification: `IndClass.sector`, `IndClass.industry`, `IndClass.subindustry`.
    Group,
    /// A constant between 0 and 1 (a quantile's level).
    Level,
}

/// How an operator reads the panel (decides how it is parallelised).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Cell by cell; folded at compile time when all inputs are constants.
    Elementwise,
    /// Along each asset's history.
    TimeSeries,
    /// Across assets on each date.
    CrossSection,
}

/// A unit: dollars^a × shares^b, or free (a constant, an unknown column).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    /// Takes the unit of whatever it meets.
    Free,
    /// Exponents of dollars and of shares.
    Dim(f64, f64),
}

/// A pure number: ranks, correlations, returns, comparisons.
pub const NUMBER: Unit = Unit::Dim(0.0, 0.0);
pub const PRICE: Unit = Unit::Dim(1.0, -1.0);
pub const SHARES: Unit = Unit::Dim(0.0, 1.0);
pub const DOLLARS: Unit = Unit::Dim(1.0, 0.0);

impl Unit {
    pub(super) fn same(self, other: Unit) -> bool {
        match (self, other) {
            (Unit::Dim(a, b), Unit::Dim(c, d)) => (a - c).abs() < 1e-9 && (b - d).abs() < 1e-9,
            _ => true,
        }
    }

    /// The known one of two units that agree.
    pub(super) fn or(self, other: Unit) -> Unit {
        if self == Unit::Free {
            other
        } else {
            self
        }
    }

    pub(super) fn times(self, other: Unit, sign: f64) -> Unit {
        match (self, other) {
            (Unit::Dim(a, b), Unit::Dim(c, d)) => Unit::Dim(a + sign * c, b + sign * d),
            // 1 / close is per price; 2 * close a price.
            (Unit::Free, Unit::Dim(c, d)) => Unit::Dim(sign * c, sign * d),
            (u, Unit::Free) => u,
        }
    }

    pub(super) fn pow(self, e: f64) -> Unit {
        match self {
            Unit::Dim(a, b) => Unit::Dim(a * e, b * e),
            Unit::Free => Unit::Free,
        }
    }

    /// "a price", "a volume in shares", ... for messages.
    pub fn describe(self) -> String {
        match self {
            Unit::Free => "a number".into(),
            u if u.same(NUMBER) => "a pure number".into(),
            u if u.same(PRICE) => "a price".into(),
            u if u.same(SHARES) => "a volume in shares".into(),
            u if u.same(DOLLARS) => "a dollar amount".into(),
            Unit::Dim(a, b) => {
                let part = |name: &str, e: f64| {
                    if e == 0.0 {
                        None
                    } else if e == 1.0 {
                        Some(name.to_string())
                    } else {
                        Some(format!("{name}^{e}"))
                    }
                };
                let parts: Vec<String> = [part("dollars", a), part("shares", b)].into_iter().flatten().collect();
                format!("a quantity in {}", parts.join("·"))
            }
        }
    }
}

/// The unit of a field by name (case-insensitive): the market fields and what is derived
/// from them; [`Unit::Free`] for any other column.
pub fn of_field(name: &str) -> Unit {
    let n = name.to_ascii_lowercase();
    match n.as_str() {
        "open" | "high" | "low" | "close" | "vwap" => PRICE,
        "volume" => SHARES,
        "returns" => NUMBER,
        "cap" => DOLLARS,
        _ if n.strip_prefix("adv").is_some_and(|d| d.parse::<f64>().is_ok()) => DOLLARS,
        _ => Unit::Free,
    }
}

/// How an operator's result's unit of measure (dollars, shares, a price, a pure number)
/// follows from its series arguments' (checked by `expr::units`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Units {
    /// Every series argument in one unit, which the result keeps (`x + y`, `ts_mean`).
    Same,
    /// Both sides in one unit; the result (1 or 0) is a pure number.
    Compare,
    /// A pure number whatever the arguments (`rank`, `correlation`, `log`).
    Number,
    /// `c ? x : y`: the branches in one unit, the condition free.
    Branches,
    /// The product of the two arguments' units (`x * y`, `covariance`).
    Product,
    /// The first argument's unit over the second's.
    Quotient,
    /// The base's unit to a constant exponent; a varying exponent needs a pure number.
    Power,
    /// Half the exponents (`sqrt`).
    Root,
    /// The unit to the power of the window (`ts_product`).
    WindowPower,
}

impl Units {
    /// The rule in words (`alphaloop ops`).
    pub fn describe(self) -> &'static str {
        match self {
            Units::Same => "its series arguments' unit (they must agree)",
            Units::Compare => "a pure number (both sides must agree)",
            Units::Number => "a pure number",
            Units::Branches => "the branches' unit (they must agree)",
            Units::Product => "the product of the arguments' units",
            Units::Quotient => "the first argument's unit over the second's",
            Units::Power => "the base's unit to the exponent (a constant), or a pure number",
            Units::Root => "the square root of the argument's unit",
            Units::WindowPower => "the argument's unit to the power d",
        }
    }
}

/// What a kernel gets besides its inputs.
pub struct OpCtx<'a> {
    pub n_dates: usize,
    pub n_assets: usize,
    /// Window arguments, in order.
    pub windows: &'a [usize],
    pub groups: Option<&'a Groups>,
    /// The result's one consumer is an element-wise operator: an element-wise result may
    /// be returned uncomputed ([`Value::Lazy`]) and computed where it is read.
    pub lazy: bool,
}

pub type EvalFn = fn(Vec<Value>, &OpCtx) -> Value;

/// One operator.
pub struct OpDef {
    pub name: &'static str,
    pub aliases: &'static [&'static str],
    pub params: &'static [Param],
    pub kind: Kind,
    /// How the result's unit of measure follows from the arguments' (`expr::units`).
    pub units: Units,
    /// Call form and exact meaning, as shown to users and to the LLM writer.
    pub doc: &'static str,
    pub eval: EvalFn,
}

impl std::fmt::Debug for OpDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.name)
    }
}

impl OpDef {
    /// Number of required arguments.
    pub fn min_args(&self) -> usize {
        self.params.iter().filter(|p| !matches!(p, Param::Optional(_))).count()
    }
}

use Kind::*;
use Param::*;

const S: &[Param] = &[Series];
const SS: &[Param] = &[Series, Series];
const SSS: &[Param] = &[Series, Series, Series];
const SW: &[Param] = &[Series, Window];
const SSW: &[Param] = &[Series, Series, Window];
const SWL: &[Param] = &[Series, Window, Level];

fn args<const N: usize>(v: Vec<Value>) -> [Value; N] {
    v.try_into().unwrap_or_else(|v: Vec<Value>| panic!("arity checked at compile time, got {}", v.len()))
}

#[inline(always)]
fn b(v: bool) -> f64 {
    if v {
        1.0
    } else {
        0.0
    }
}

/// Comparison: 1.0 / 0.0, NaN if an input is NaN.
/// A comparison, generic over `f` so that each one is inlined into its element loop and
/// vectorises (through a function pointer, `lt` cost 5× a `mul`).
fn cmp(v: Vec<Value>, c: &OpCtx, f: impl Fn(f64, f64) -> bool + Send + Sync + 'static) -> Value {
    let [x, y] = args(v);
    map2(c.lazy, x, y, move |a, c| if a.is_nan() | c.is_nan() { f64::NAN } else { b(f(a, c)) })
}

fn ts(v: Vec<Value>, c: &OpCtx, k: fn(&[f64], usize, &mut [f64])) -> Value {
    let [x] = args(v);
    let p = x.into_panel(c.n_dates, c.n_assets);
    Value::Panel(Arc::new(rolling::apply(&p, c.windows[0], k)))
}

/// Calls `f` with `p` as a kernel input: one it may write its result into where this was
/// the last reference to it (the evaluator hands over its last one), else one to read.
fn with_src<R>(p: Arc<Panel>, f: impl FnOnce(Src<'_>) -> R) -> R {
    match Arc::try_unwrap(p) {
        Ok(p) => f(Src::Take(p)),
        Err(p) => f(Src::Read(&p)),
    }
}

/// A one-input window kernel that takes the whole panel (eight assets at a time).
fn ts8(v: Vec<Value>, c: &OpCtx, k: fn(Src<'_>, usize) -> Panel) -> Value {
    let [x] = args(v);
    Value::Panel(Arc::new(with_src(x.into_panel(c.n_dates, c.n_assets), |x| k(x, c.windows[0]))))
}

fn ts2(v: Vec<Value>, c: &OpCtx, k: fn(Src<'_>, Src<'_>, usize) -> Panel) -> Value {
    let [x, y] = args(v);
    let (x, y) = (x.into_panel(c.n_dates, c.n_assets), y.into_panel(c.n_dates, c.n_assets));
    Value::Panel(Arc::new(with_src(x, |x| with_src(y, |y| k(x, y, c.windows[0])))))
}

fn ts_extreme(v: Vec<Value>, c: &OpCtx, which: Extreme) -> Value {
    let [x] = args(v);
    let d = c.windows[0];
    Value::Panel(Arc::new(with_src(x.into_panel(c.n_dates, c.n_assets), |x| rolling::extreme_panel(x, d, which))))
}

fn cs(v: Vec<Value>, c: &OpCtx, k: fn(Src<'_>) -> Panel) -> Value {
    let [x] = args(v);
    Value::Panel(Arc::new(with_src(x.into_panel(c.n_dates, c.n_assets), k)))
}

/// The catalogue. Names are matched case-insensitively.
pub static CATALOGUE: &[OpDef] = &[
    // ---- arithmetic and logic (element-wise) ----
    OpDef { name: "add", aliases: &[], params: SS, kind: Elementwise, units: Units::Same, doc: "x + y", eval: |v, c| { let [x, y] = args(v); map2(c.lazy, x, y, |a, b| a + b) } },
    OpDef { name: "sub", aliases: &[], params: SS, kind: Elementwise, units: Units::Same, doc: "x - y", eval: |v, c| { let [x, y] = args(v); map2(c.lazy, x, y, |a, b| a - b) } },
    OpDef { name: "mul", aliases: &[], params: SS, kind: Elementwise, units: Units::Product, doc: "x * y", eval: |v, c| { let [x, y] = args(v); map2(c.lazy, x, y, |a, b| a * b) } },
    OpDef { name: "div", aliases: &[], params: SS, kind: Elementwise, units: Units::Quotient, doc: "x / y; division by zero gives NaN", eval: |v, c| { let [x, y] = args(v); map2(c.lazy, x, y, |a, b| if b == 0.0 { f64::NAN } else { a / b }) } },
    OpDef { name: "pow", aliases: &[], params: SS, kind: Elementwise, units: Units::Power, doc: "x ^ y: x to the power y; NaN for a negative x with a fractional y", eval: |v, c| {
        let [x, y] = args(v);
        match y {
            // numpy's own fast paths for `x ** 2`, `x ** 1` and `x ** 0.5` (a square and
            // a square root are correctly rounded, where libm's pow allows 0.52 ulp), at
            // the cost of a multiply or a square root.
            Value::Scalar(2.0) => map1(c.lazy, x, |a| a * a),
            Value::Scalar(1.0) => map1(c.lazy, x, |a| a),
            Value::Scalar(0.5) => map1(c.lazy, x, f64::sqrt),
            // `x ^ 4`, `x ^ 5`: products, libm's bits (pow::powi_into).
            Value::Scalar(e) if pow::small_integer(e).is_some() => {
                // (An integer from 3 to 16, so the conversion is exact.)
                let n = e as u32;
                map2_runs(x, Value::Scalar(e), f64::powf, move |a, _, o| pow::powi_into(a, n, o))
            }
            y => map2_runs(x, y, f64::powf, pow::pow_into),
        }
    } },
    OpDef { name: "neg", aliases: &[], params: S, kind: Elementwise, units: Units::Same, doc: "-x", eval: |v, c| { let [x] = args(v); map1(c.lazy, x, |a| -a) } },
    OpDef { name: "lt", aliases: &[], params: SS, kind: Elementwise, units: Units::Compare, doc: "x < y: 1 or 0, NaN if an input is NaN", eval: |v, c| cmp(v, c, |a, b| a < b) },
    OpDef { name: "gt", aliases: &[], params: SS, kind: Elementwise, units: Units::Compare, doc: "x > y: 1 or 0, NaN if an input is NaN", eval: |v, c| cmp(v, c, |a, b| a > b) },
    OpDef { name: "le", aliases: &[], params: SS, kind: Elementwise, units: Units::Compare, doc: "x <= y: 1 or 0, NaN if an input is NaN", eval: |v, c| cmp(v, c, |a, b| a <= b) },
    OpDef { name: "ge", aliases: &[], params: SS, kind: Elementwise, units: Units::Compare, doc: "x >= y: 1 or 0, NaN if an input is NaN", eval: |v, c| cmp(v, c, |a, b| a >= b) },
    OpDef { name: "eq", aliases: &[], params: SS, kind: Elementwise, units: Units::Compare, doc: "x == y: 1 or 0, NaN if an input is NaN", eval: |v, c| cmp(v, c, |a, b| a == b) },
    OpDef { name: "ne", aliases: &[], params: SS, kind: Elementwise, units: Units::Compare, doc: "x != y: 1 or 0, NaN if an input is NaN", eval: |v, c| cmp(v, c, |a, b| a != b) },
    OpDef { name: "and", aliases: &[], params: SS, kind: Elementwise, units: Units::Number, doc: "x && y: 1 if both are non-zero else 0, NaN if an input is NaN", eval: |v, c| cmp(v, c, |a, b| (a != 0.0) & (b != 0.0)) },
    OpDef { name: "or", aliases: &[], params: SS, kind: Elementwise, units: Units::Number, doc: "x || y: 1 if either is non-zero else 0, NaN if an input is NaN", eval: |v, c| cmp(v, c, |a, b| (a != 0.0) | (b != 0.0)) },
    OpDef { name: "where", aliases: &["if_else"], params: SSS, kind: Elementwise, units: Units::Branches, doc: "c ? x : y: x where c is non-zero, y where c is zero, NaN where c is NaN", eval: |v, c| {
        let [cond, x, y] = args(v);
        map3(c.lazy, cond, x, y, |c, x, y| if c.is_nan() { f64::NAN } else if c != 0.0 { x } else { y })
    } },
    // ---- element-wise functions ----
    OpDef { name: "abs", aliases: &[], params: S, kind: Elementwise, units: Units::Same, doc: "abs(x): absolute value", eval: |v, c| { let [x] = args(v); map1(c.lazy, x, f64::abs) } },
    OpDef { name: "sign", aliases: &[], params: S, kind: Elementwise, units: Units::Number, doc: "sign(x): -1, 0 or 1", eval: |v, c| {
        let [x] = args(v);
        // Selects rather than branches (vectorises): ±1 for a non-zero, ±0 or NaN as is.
        map1(c.lazy, x, |a| {
            let unit = 1.0f64.copysign(a);
            if a.abs() > 0.0 { unit } else { a * 0.0 }
        })
    } },
    OpDef { name: "log", aliases: &["ln"], params: S, kind: Elementwise, units: Units::Number, doc: "log(x): natural log, NaN for x <= 0", eval: |v, c| { let [x] = args(v); map1(c.lazy, x, |a| if a > 0.0 { a.ln() } else { f64::NAN }) } },
    OpDef { name: "signedpower", aliases: &[], params: SS, kind: Elementwise, units: Units::Power, doc: "signedpower(x, a) = sign(x) * |x|^a", eval: |v, c| {
        let [x, y] = args(v);
        match y {
            // As `x ^ 2`: the square by a multiply (exactly sign(x) · x², rounded once).
            Value::Scalar(2.0) => map1(c.lazy, x, |a| if a == 0.0 { 0.0 } else { a * a.abs() }),
            // sign(0) is 0 (f64::signum gives 1): 0 · 0^a, so 0 for a ≥ 0 (0^0 is 1) and
            // NaN for a < 0 (0 · inf).
            y => map2(c.lazy, x, y, |a, e| if a.is_nan() { f64::NAN } else if a == 0.0 { a * 0.0f64.powf(e) } else { a.signum() * a.abs().powf(e) }),
        }
    } },
    // ---- extensions beyond the paper ----
    OpDef { name: "sqrt", aliases: &[], params: S, kind: Elementwise, units: Units::Root, doc: "sqrt(x): square root, NaN for x < 0", eval: |v, c| { let [x] = args(v); map1(c.lazy, x, f64::sqrt) } },
    OpDef { name: "exp", aliases: &[], params: S, kind: Elementwise, units: Units::Number, doc: "exp(x): e to the power x (NaN on overflow)", eval: |v, c| { let [x] = args(v); map1(c.lazy, x, f64::exp) } },
    OpDef { name: "min2", aliases: &["less"], params: SS, kind: Elementwise, units: Units::Same, doc: "min(x, y) with two series: element-wise minimum, NaN if either is NaN; also less(x, y), which takes a constant y as well (Qlib's Less)", eval: |v, c| {
        let [x, y] = args(v);
        map2(c.lazy, x, y, |a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.min(b) })
    } },
    OpDef { name: "max2", aliases: &["greater"], params: SS, kind: Elementwise, units: Units::Same, doc: "max(x, y) with two series: element-wise maximum, NaN if either is NaN; also greater(x, y), which takes a constant y as well (Qlib's Greater)", eval: |v, c| {
        let [x, y] = args(v);
        map2(c.lazy, x, y, |a, b| if a.is_nan() || b.is_nan() { f64::NAN } else { a.max(b) })
    } },
    // ---- time series: the past d days including today; a value only when all d are finite ----
    OpDef { name: "delay", aliases: &[], params: SW, kind: TimeSeries, units: Units::Same, doc: "delay(x, d): x d days ago", eval: |v, c| ts8(v, c, rolling::delay_panel) },
    OpDef { name: "delta", aliases: &[], params: SW, kind: TimeSeries, units: Units::Same, doc: "delta(x, d) = x - delay(x, d)", eval: |v, c| ts8(v, c, rolling::delta_panel) },
    OpDef { name: "ts_sum", aliases: &["sum"], params: SW, kind: TimeSeries, units: Units::Same, doc: "ts_sum(x, d) / sum(x, d): sum over the past d days", eval: |v, c| ts8(v, c, |x, d| rolling::sum_panel(x, d)) },
    OpDef { name: "ts_mean", aliases: &["mean"], params: SW, kind: TimeSeries, units: Units::Same, doc: "ts_mean(x, d): mean over the past d days", eval: |v, c| ts8(v, c, |x, d| rolling::mean_panel(x, d)) },
    OpDef { name: "ts_std", aliases: &["stddev"], params: SW, kind: TimeSeries, units: Units::Same, doc: "ts_std(x, d) / stddev(x, d): sample standard deviation (ddof = 1) over the past d days", eval: |v, c| ts8(v, c, |x, d| rolling::std_panel(x, d)) },
    OpDef { name: "ts_corr", aliases: &["correlation"], params: SSW, kind: TimeSeries, units: Units::Number, doc: "ts_corr(x, y, d) / correlation(x, y, d): Pearson correlation over the past d days; NaN when either side is constant", eval: |v, c| ts2(v, c, |x, y, d| rolling::corr_panel(x, y, d)) },
    OpDef { name: "ts_cov", aliases: &["covariance"], params: SSW, kind: TimeSeries, units: Units::Product, doc: "ts_cov(x, y, d) / covariance(x, y, d): sample covariance (ddof = 1) over the past d days", eval: |v, c| ts2(v, c, |x, y, d| rolling::cov_panel(x, y, d)) },
    OpDef { name: "ts_min", aliases: &[], params: SW, kind: TimeSeries, units: Units::Same, doc: "ts_min(x, d), also min(x, d) with a constant d: minimum over the past d days", eval: |v, c| ts_extreme(v, c, Extreme::Min) },
    OpDef { name: "ts_max", aliases: &[], params: SW, kind: TimeSeries, units: Units::Same, doc: "ts_max(x, d), also max(x, d) with a constant d: maximum over the past d days", eval: |v, c| ts_extreme(v, c, Extreme::Max) },
    OpDef { name: "ts_argmin", aliases: &[], params: SW, kind: TimeSeries, units: Units::Number, doc: "ts_argmin(x, d): 1-based day of the minimum counted from the oldest (d = today); ties give the oldest", eval: |v, c| ts_extreme(v, c, Extreme::ArgMin) },
    OpDef { name: "ts_argmax", aliases: &[], params: SW, kind: TimeSeries, units: Units::Number, doc: "ts_argmax(x, d): 1-based day of the maximum counted from the oldest (d = today); ties give the oldest", eval: |v, c| ts_extreme(v, c, Extreme::ArgMax) },
    OpDef { name: "ts_product", aliases: &["product"], params: SW, kind: TimeSeries, units: Units::WindowPower, doc: "ts_product(x, d) / product(x, d): product over the past d days", eval: |v, c| ts(v, c, rolling::product) },
    OpDef { name: "ts_rank", aliases: &[], params: SW, kind: TimeSeries, units: Units::Number, doc: "ts_rank(x, d): percentile rank of today's value among the past d values, ties averaged, in (0, 1]", eval: |v, c| ts8(v, c, |x, d| rolling::ts_rank_panel(x, d)) },
    OpDef { name: "decay_linear", aliases: &[], params: SW, kind: TimeSeries, units: Units::Same, doc: "decay_linear(x, d): weighted mean with weights d (today) down to 1 (oldest), normalised to sum 1", eval: |v, c| ts8(v, c, |x, d| rolling::decay_linear_panel(x, d)) },
    OpDef { name: "ts_zscore", aliases: &[], params: SW, kind: TimeSeries, units: Units::Number, doc: "ts_zscore(x, d) = (x - ts_mean(x, d)) / ts_std(x, d); NaN for a constant window (extension)", eval: |v, c| ts(v, c, rolling::zscore) },
    OpDef { name: "ts_ffill", aliases: &["ffill"], params: SW, kind: TimeSeries, units: Units::Same, doc: "ts_ffill(x, d): the last finite value of x within the past d days (forward fill with a limit; extension)", eval: |v, c| ts(v, c, rolling::ffill) },
    OpDef { name: "ts_slope", aliases: &["slope"], params: SW, kind: TimeSeries, units: Units::Same, doc: "ts_slope(x, d): slope of the least-squares line through the past d values against their day, 1 (oldest) to d (today); 0 for a constant window (Qlib's Slope; extension)", eval: |v, c| ts(v, c, rolling::slope) },
    OpDef { name: "ts_rsquare", aliases: &["rsquare"], params: SW, kind: TimeSeries, units: Units::Number, doc: "ts_rsquare(x, d): R-squared of that line; NaN for a constant window (Qlib's Rsquare; extension)", eval: |v, c| ts(v, c, rolling::rsquare) },
    OpDef { name: "ts_resi", aliases: &["resi"], params: SW, kind: TimeSeries, units: Units::Same, doc: "ts_resi(x, d): today's value less that line's value today (Qlib's Resi; extension)", eval: |v, c| ts(v, c, rolling::resi) },
    OpDef { name: "ts_quantile", aliases: &["quantile"], params: SWL, kind: TimeSeries, units: Units::Same, doc: "ts_quantile(x, d, q): the q-quantile (a constant, 0 <= q <= 1) of the past d values, linear between the nearest two as pandas' rolling quantile (Qlib's Quantile; extension)", eval: |v, c| {
        let [x, q] = args(v);
        let Value::Scalar(q) = q else { unreachable!("levels checked constant at compile time") };
        let (p, d) = (x.into_panel(c.n_dates, c.n_assets), c.windows[0]);
        Value::Panel(Arc::new(rolling::per_asset(&p, |s, o| rolling::quantile(s, d, q, o))))
    } },
    // ---- cross-sectional: across stocks on each date ----
    OpDef { name: "rank", aliases: &["cs_rank"], params: S, kind: CrossSection, units: Units::Number, doc: "rank(x): percentile rank across stocks in (0, 1], ties averaged, NaN ignored", eval: |v, c| cs(v, c, |x| cross::rank(x)) },
    OpDef { name: "cs_zscore", aliases: &["zscore"], params: S, kind: CrossSection, units: Units::Number, doc: "cs_zscore(x) = (x - mean) / std across stocks (ddof = 1), NaN if all equal (extension)", eval: |v, c| cs(v, c, |x| cross::zscore(x)) },
    OpDef { name: "scale", aliases: &[], params: &[Series, Optional(1.0)], kind: CrossSection, units: Units::Number, doc: "scale(x, a = 1): x * a / sum(|x|) across stocks", eval: |v, c| {
        let [x, a] = args(v);
        let x = x.into_panel(c.n_dates, c.n_assets);
        // x × a / sum(|x|) in that order; with a = 1 the product is x itself.
        let out = match a {
            Value::Scalar(1.0) => cross::scale(&x),
            a => cross::scaled(&x, &map2(false, Value::Panel(x.clone()), a, |x, a| x * a).into_panel(c.n_dates, c.n_assets)),
        };
        Value::Panel(Arc::new(out))
    } },
    OpDef { name: "indneutralize", aliases: &[], params: &[Series, Group], kind: CrossSection, units: Units::Same, doc: "indneutralize(x, IndClass.sector): x minus its same-date mean within the stock's group (with the shipped data every level is the GICS sector)", eval: |v, c| {
        let [x] = args(v);
        let p = x.into_panel(c.n_dates, c.n_assets);
        let g = c.groups.expect("groups checked at compile time");
        Value::Panel(Arc::new(cross::indneutralize(&p, g)))
    } },
];

/// Finds an operator by name or alias (case-insensitive).
pub fn lookup(name: &str) -> Option<&'static OpDef> {
    let n = name.to_ascii_lowercase();
    CATALOGUE.iter().find(|o| o.name == n || o.aliases.contains(&n.as_str()))
}

/// Every name a user can call: operator names and aliases, with `min`/`max` in place of
/// their internal two-series forms.
pub fn callable_names() -> Vec<&'static str> {
    let mut v: Vec<&str> = CATALOGUE
        .iter()
        .flat_map(|o| std::iter::once(o.name).filter(|n| !["min2", "max2"].contains(n)).chain(o.aliases.iter().copied()))
        .collect();
    v.extend(["min", "max"]);
    v
}

/// The catalogue for scripts (`alphaloop ops --json`): per operator the name a user calls
/// (`min`/`max` for the two-series forms), aliases, kind, arguments and meaning; then the
/// fields every data set has.
pub fn catalogue_json() -> serde_json::Value {
    let ops: Vec<serde_json::Value> = CATALOGUE
        .iter()
        .map(|o| {
            let name = match o.name {
                "min2" => "min",
                "max2" => "max",
                n => n,
            };
            let params: Vec<String> = o
                .params
                .iter()
                .map(|p| match p {
                    Series => "series".to_string(),
                    Optional(d) => format!("series (optional, default {d})"),
                    Window => "window".to_string(),
                    Group => "group".to_string(),
                    Level => "level".to_string(),
                })
                .collect();
            let kind = match o.kind {
                Elementwise => "elementwise",
                TimeSeries => "time_series",
                CrossSection => "cross_section",
            };
            serde_json::json!({ "name": name, "aliases": o.aliases, "kind": kind, "params": params, "doc": o.doc, "units": o.units.describe() })
        })
        .collect();
    let unit = |n: &str| of_field(&n.replace("{d}", "20")).describe();
    let mut fields: Vec<serde_json::Value> = crate::data::STORED_FIELDS.iter().map(|f| serde_json::json!({ "name": f, "doc": "split/dividend adjusted", "unit": unit(f) })).collect();
    fields.extend(crate::data::DERIVED_FIELDS.iter().map(|(n, d)| serde_json::json!({ "name": n, "doc": d, "unit": unit(n) })));
    serde_json::json!({ "operators": ops, "fields": fields })
}

/// The catalogue as text, one operator per line, grouped by kind (for `alphaloop ops`
/// and the writer's prompt).
pub fn describe() -> String {
    let mut s = String::new();
    for (kind, title) in [(Elementwise, "Element-wise"), (TimeSeries, "Time-series (past d days including today; NaN unless all d values are finite)"), (CrossSection, "Cross-sectional (across stocks, per date)")] {
        s.push_str(title);
        s.push_str(":\n");
        for o in CATALOGUE.iter().filter(|o| o.kind == kind) {
            s.push_str("  ");
            s.push_str(o.doc);
            s.push('\n');
        }
    }
    s
}
