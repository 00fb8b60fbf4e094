//! Kubernetes quantities compared exactly. A quantity is `mantissa × 10^a ×
//! 2^b`, kept as integers (`1.5Gi` is 15 × 10^-1 × 2^30), and two are compared
//! by scaling both to the smaller exponents: no float rounds a cap of
//! `1000000000000000001` down onto a request one above it. Input is bounded
//! (64 characters, exponents of ±100), so the integers stay small.

use std::cmp::Ordering;

use num_bigint::BigInt;

/// An exact quantity.
#[derive(Debug, Clone)]
pub struct Quantity {
    mantissa: BigInt,
    exp10: i32,
    exp2: i32,
}

/// The largest decimal exponent (`1e100`) a quantity may write.
const MAX_EXP10: i32 = 100;

/// Parses a Kubernetes quantity (`500m`, `2`, `1.5Gi`, `1e3`, `+1`).
pub fn parse(s: &str) -> Option<Quantity> {
    let s = s.trim();
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let (negative, digits) = match num.as_bytes().first() {
        Some(b'-') => (true, &num[1..]),
        Some(b'+') => (false, &num[1..]),
        _ => (false, num),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let mut mantissa: BigInt = format!("{whole}{fraction}").parse().ok()?;
    if negative {
        mantissa = -mantissa;
    }
    let (exp10, exp2) = match suffix {
        "" => (0, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().ok()?;
            if e.abs() > MAX_EXP10 {
                return None;
            }
            (e, 0)
        }
        _ => return None,
    };
    Some(Quantity { mantissa, exp10: exp10 - fraction.len() as i32, exp2 })
}

impl Quantity {
    /// The mantissa scaled up by what its exponents exceed `exp10`, `exp2`.
    fn scaled(&self, exp10: i32, exp2: i32) -> BigInt {
        let tens = BigInt::from(10).pow((self.exp10 - exp10) as u32);
        (&self.mantissa * tens) << ((self.exp2 - exp2) as usize)
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        let (e10, e2) = (self.exp10.min(other.exp10), self.exp2.min(other.exp2));
        self.scaled(e10, e2).cmp(&other.scaled(e10, e2))
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Quantity {}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        parse(s).unwrap_or_else(|| panic!("{s} parses"))
    }

    #[test]
    fn equal_values_written_differently_are_equal() {
        for (a, b) in
            [("200m", "0.2"), ("1k", "1000"), ("1e3", "1k"), ("1Ki", "1024"), ("1.5Gi", "1536Mi"), ("+1", "1")]
        {
            assert_eq!(q(a), q(b), "{a} = {b}");
        }
    }

    #[test]
    fn comparisons_are_exact_where_floats_round() {
        // As f64 both are 1e18: a cap of 1000000000000000000 let the larger through.
        assert!(q("1000000000000000001") > q("1000000000000000000"));
        assert!(q("1E") < q("1000000000000000001"));
        assert!(q("0.30000000000000001") > q("0.3"));
        assert!(q("1Gi") > q("1G"));
        assert!(q("-1") < q("0"));
        assert!(q("999m") < q("1"));
    }

    #[test]
    fn what_is_not_a_quantity() {
        for bad in ["", "abc", "1.2.3", "--1", "1Xi", ".", "1e101", "1e-999", "1 Gi", &"9".repeat(65)] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }
}
