//! Removes form fields that look sensitive before anything is stored: by field name
//! (passwords, card numbers, CVC, SSN, secrets, tokens, PINs, IBANs ...) and by value (card
//! numbers that pass the Luhn check, US social security numbers).

use serde_json::Value;

/// Name fragments that mark a field as sensitive wherever they appear in the name (compared
/// after lower-casing and dropping everything but letters and digits).
const SENSITIVE_FRAGMENTS: [&str; 27] = [
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "creditcard",
    "cardnumber",
    "cardnum",
    "ccnumber",
    "ccnum",
    "ccexp",
    "cardexp",
    "cardcode",
    "cvc",
    "cvv",
    "securitycode",
    "socialsecurity",
    "iban",
    "apikey",
    "accesskey",
    "privatekey",
    "routingnumber",
    "accountnumber",
    "bankaccount",
    "taxid",
    "nationalid",
    "passport",
];

/// Words that mark a field as sensitive when they are a whole word of its name (`pin`,
/// `pinCode`, `user_pin`; not `shipping`).
const SENSITIVE_WORDS: [&str; 7] = ["pwd", "pin", "ssn", "csc", "cvn", "otp", "sin"];

/// Splits a field name into lower-case words at separators and camelCase boundaries.
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Whether a field of this name must not be stored.
pub fn is_sensitive_name(name: &str) -> bool {
    let words = words(name);
    let joined: String = words.concat();
    SENSITIVE_FRAGMENTS.iter().any(|f| joined.contains(f))
        || words.iter().any(|w| SENSITIVE_WORDS.contains(&w.as_str()))
}

/// Whether a value looks like a payment card number or a US social security number.
pub fn is_sensitive_value(value: &Value) -> bool {
    let Value::String(s) = value else {
        return false;
    };
    let trimmed = s.trim();
    if trimmed.len() > 40 {
        return false;
    }
    let digits: Vec<u32> = trimmed.chars().filter_map(|c| c.to_digit(10)).collect();
    let only_digits_and_separators = trimmed
        .chars()
        .all(|c| c.is_ascii_digit() || c == ' ' || c == '-');
    if !only_digits_and_separators {
        return false;
    }
    let ssn = {
        let parts: Vec<&str> = trimmed.split('-').collect();
        parts.len() == 3
            && parts[0].len() == 3
            && parts[1].len() == 2
            && parts[2].len() == 4
            && digits.len() == 9
    };
    ssn || ((13..=19).contains(&digits.len()) && luhn(&digits))
}

fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Removes sensitive fields from an object of form fields, at any depth.
pub fn strip(fields: &mut Value) {
    match fields {
        Value::Object(map) => {
            map.retain(|name, value| !is_sensitive_name(name) && !is_sensitive_value(value));
            for value in map.values_mut() {
                strip(value);
            }
        }
        Value::Array(items) => {
            items.retain(|v| !is_sensitive_value(v));
            for item in items.iter_mut() {
                strip(item);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names() {
        for name in [
            "password",
            "confirmPassword",
            "user_passwd",
            "pwd",
            "card-number",
            "cc_number",
            "ccNum",
            "cvc",
            "CVV2",
            "ssn",
            "social_security_number",
            "iban",
            "pin",
            "pinCode",
            "api_token",
            "clientSecret",
        ] {
            assert!(is_sensitive_name(name), "{name} should be sensitive");
        }
        for name in [
            "email", "shipping", "company", "name", "spinach", "message", "cc",
        ] {
            assert!(!is_sensitive_name(name), "{name} should be kept");
        }
    }

    #[test]
    fn values_and_nesting() {
        let mut v = json!({
            "name": "Ada",
            "note": "4242 4242 4242 4242",
            "id": "123-45-6789",
            "phone": "+1 555 0100",
            "nested": {"password": "x", "city": "Paris"},
        });
        strip(&mut v);
        assert_eq!(
            v,
            json!({"name": "Ada", "phone": "+1 555 0100", "nested": {"city": "Paris"}})
        );
    }
}
