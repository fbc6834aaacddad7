//! Ids that sort by the time they were made: events', runs' and deliveries' primary keys, so new
//! rows land at the end of their index.

use chrono::{DateTime, Utc};

/// A new row id: a UUID whose leading bits are the current Unix time in milliseconds
/// (version 7 layout), so new rows land at the end of the primary-key index instead of on a
/// random page of it. The other 74 bits start random each millisecond and count up within it,
/// so the ids one process makes always rise: the events of a batch keep their order by id even
/// when they share a millisecond (RFC 9562, "monotonic random").
pub fn time_ordered_id() -> String {
    let now = u64::try_from(Utc::now().timestamp_millis()).unwrap_or_default();
    let (millis, counter) = {
        let mut last = LAST_ID
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *last = next_after(*last, now, fresh_counter);
        *last
    };
    encode(millis, counter).to_string()
}

/// Makes every later [`time_ordered_id`] of this process sort after `id` (one made earlier, by
/// this process or one before it), whatever the clock says: a process started after the clock
/// stepped back continues above the ids already stored, so reading "everything after an id"
/// still finds what it makes. Text that is not such an id changes nothing.
pub fn never_below(id: &str) {
    let Ok(uuid) = uuid::Uuid::parse_str(id) else {
        return;
    };
    let floor = decode(&uuid);
    let mut last = LAST_ID
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if floor > *last {
        *last = floor;
    }
}

/// The (millisecond, counter) of an id [`encode`] made.
fn decode(uuid: &uuid::Uuid) -> (u64, u128) {
    let b = uuid.as_bytes();
    let mut millis = [0u8; 8];
    millis[2..].copy_from_slice(&b[..6]);
    let high = (u128::from(b[6] & 0x0f) << 8) | u128::from(b[7]);
    let mut low = [0u8; 8];
    low[1..].copy_from_slice(&b[9..]);
    let low = (u128::from(b[8] & 0x3f) << 56) | u128::from(u64::from_be_bytes(low));
    (u64::from_be_bytes(millis), (high << 62) | low)
}

/// The 74 bits after the time: random, with the top bit clear so a millisecond can count up
/// from it 2^73 times before it runs over.
const COUNTER_BITS: u32 = 74;

/// The last id made by this process: its millisecond and counter.
static LAST_ID: std::sync::Mutex<(u64, u128)> = std::sync::Mutex::new((0, 0));

fn fresh_counter() -> u128 {
    let random = u128::from_be_bytes(*uuid::Uuid::new_v4().as_bytes());
    random & ((1u128 << (COUNTER_BITS - 1)) - 1)
}

/// The (millisecond, counter) after `last` at `now`: a later millisecond starts a fresh
/// counter; the same one (or a clock that stepped back) counts up from the last.
fn next_after(last: (u64, u128), now: u64, fresh: impl Fn() -> u128) -> (u64, u128) {
    let (millis, counter) = last;
    if now > millis {
        return (now, fresh());
    }
    let next = counter + 1;
    if next >> COUNTER_BITS == 0 {
        (millis, next)
    } else {
        (millis + 1, fresh())
    }
}

/// A version 7 UUID of `millis` and a 74-bit `counter` (12 bits before the variant, 62 after).
fn encode(millis: u64, counter: u128) -> uuid::Uuid {
    let high = ((counter >> 62) & 0xfff) as u16;
    let low = (counter & ((1u128 << 62) - 1)) as u64;
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6] = 0x70 | (high >> 8) as u8;
    bytes[7] = high as u8;
    bytes[8] = 0x80 | ((low >> 56) as u8 & 0x3f);
    bytes[9..].copy_from_slice(&low.to_be_bytes()[1..]);
    uuid::Uuid::from_bytes(bytes)
}

/// An id as [`time_ordered_id`] would have made it at `at` (random after the time), for rows
/// written as if made then: a benchmark's book of past events.
pub fn time_ordered_id_at(at: DateTime<Utc>) -> String {
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or_default();
    encode(millis, fresh_counter()).to_string()
}

/// The smallest [`time_ordered_id`] of an instant: every id made at or after it sorts after.
pub fn time_ordered_floor(at: DateTime<Utc>) -> String {
    let millis = u64::try_from(at.timestamp_millis()).unwrap_or_default();
    uuid::Builder::from_unix_timestamp_millis(millis, &[0u8; 10])
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_of_one_process_rise_within_a_millisecond_and_keep_the_layout() {
        let ids: Vec<String> = (0..10_000).map(|_| time_ordered_id()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids fell");
        let parsed = uuid::Uuid::parse_str(&ids[0]).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
        assert!(time_ordered_floor(Utc::now() - chrono::Duration::seconds(1)) < ids[0]);
    }

    #[test]
    fn an_id_made_as_of_an_instant_sorts_within_its_millisecond() {
        let at = Utc::now() - chrono::Duration::days(12);
        let id = time_ordered_id_at(at);
        assert!(time_ordered_floor(at) <= id);
        assert!(id < time_ordered_floor(at + chrono::Duration::milliseconds(1)));
        assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 7);
    }

    #[test]
    fn ids_made_after_a_floor_sort_above_it_whatever_the_clock() {
        let full = (1u128 << COUNTER_BITS) - 1;
        for (millis, counter) in [(5, 2), (1_795_000_000_000, full), (0, 0)] {
            assert_eq!(decode(&encode(millis, counter)), (millis, counter));
        }
        // An id a second ahead of the clock (stored before the clock stepped back): the next
        // ids still sort after it. (A second, so other tests' ids stay near the clock.)
        let ahead = time_ordered_id_at(Utc::now() + chrono::Duration::seconds(1));
        never_below(&ahead);
        let next = time_ordered_id();
        assert!(next > ahead, "{next} after {ahead}");
        never_below("not an id");
        assert!(time_ordered_id() > next);
    }

    #[test]
    fn the_counter_carries_into_the_next_millisecond_and_a_clock_going_back_still_rises() {
        let full = (1u128 << COUNTER_BITS) - 1;
        assert_eq!(next_after((5, full), 5, || 7), (6, 7));
        assert_eq!(next_after((5, 1), 3, || 7), (5, 2));
        assert_eq!(next_after((5, 1), 9, || 7), (9, 7));
        assert!(encode(5, 2).to_string() < encode(5, 3).to_string());
        assert!(encode(5, full).to_string() < encode(6, 0).to_string());
    }
}
