//! Generated credentials: the password an instance gets when its spec names
//! none, so no instance is ever served without one.

/// Characters of a generated password: letters and digits, safe in env
/// variables, URLs and shells.
const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// A password of `len` characters from the OS random source. Bytes beyond the
/// largest multiple of the alphabet size are dropped, so every character is
/// equally likely (log2(62) ≈ 5.95 bits each: 32 characters ≈ 190 bits).
pub fn random_password(len: usize) -> Result<String, String> {
    let limit = 256 - (256 % ALPHABET.len());
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 64];
    while out.len() < len {
        getrandom::fill(&mut buf).map_err(|e| format!("the OS random source failed: {e}"))?;
        for b in buf {
            if (b as usize) < limit && out.len() < len {
                out.push(ALPHABET[b as usize % ALPHABET.len()] as char);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_long_distinct_and_alphanumeric() {
        let a = random_password(32).unwrap();
        let b = random_password(32).unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, b);
        assert_eq!(random_password(24).unwrap().len(), 24);
    }

    #[test]
    fn every_character_of_the_alphabet_turns_up() {
        let text = random_password(20_000).unwrap();
        for c in ALPHABET {
            let n = text.bytes().filter(|b| b == c).count();
            // Expected ~323 each; a biased mapping would starve or flood some.
            assert!((200..450).contains(&n), "{} appeared {n} times", *c as char);
        }
    }
}
