//! The Lua scripts of the Redis store's writes, and what their replies mean. Each is one
//! compare-and-set that Redis runs atomically (see the module above).

use super::stamp;
use crate::store::StoreError;
use crate::subjects::remote::Cas;

/// The version a write takes, after its checks (`ver`: the subject's version, `floor`: the
/// process's floor): the greatest of the counter + 1, `ver` + 1, `floor` + 1 and Redis's
/// clock in microseconds, the counter moved to it; `counted` is what `INCR` found.
macro_rules! next_version {
    () => {
        r#"
local t = redis.call('TIME')
local least = math.max(ver + 1, floor + 1, t[1] * 1000000 + t[2])
local counted = redis.call('INCR', KEYS[3])
local n = counted
if n < least then
  n = least
  redis.call('SET', KEYS[3], string.format('%d', n))
end
"#
    };
}

/// Write a subject if it is at the expected version (-1: absent), at the next version, with
/// its MAC (`ARGV[4]`, see `drift.rs`); a drift mark left on it goes (this write's event
/// tells consumers the present).
/// Replies `{1, version, counter}` (the counter as `INCR` found it, before the floors), or
/// `{0, revision, 0}` on a conflict, or `{2, 0, 0}` when its change was
/// fenced (`KEYS[4]` exists: settlement read the subject back without it). A hash written
/// before versions existed has none: it is at version 0, and the counter is kept above every
/// stored version. A subject exists while its hash has a `rev` (every write sets one), as
/// `decode` reads it.
pub(super) const PUT: &str = concat!(
    r#"
if redis.call('EXISTS', KEYS[4]) == 1 then return {2, 0, 0} end
local f = redis.call('HMGET', KEYS[1], 'rev', 'ver')
local exists = f[1] ~= false
local rev = tonumber(f[1] or '0')
local ver = tonumber(f[2] or '0')
local want = tonumber(ARGV[1])
if (want < 0 and exists) or (want >= 0 and (not exists or ver ~= want)) then
  return {0, rev, 0}
end
local floor = tonumber(ARGV[5])
"#,
    next_version!(),
    r#"redis.call('HSET', KEYS[1], 'rev', rev + 1, 'ver', n, 'json', ARGV[3], 'mac', ARGV[4])
redis.call('HDEL', KEYS[1], 'drift')
redis.call('ZADD', KEYS[2], 0, ARGV[2])
return {1, n, counted}
"#
);

/// Delete a subject if it is at the expected version, taking the next version; `{2, 0}` when
/// its change was fenced, as for `PUT`.
pub(super) const DELETE: &str = concat!(
    r#"
if redis.call('EXISTS', KEYS[4]) == 1 then return {2, 0, 0} end
local f = redis.call('HMGET', KEYS[1], 'rev', 'ver')
if f[1] == false then return {0, 0, 0} end
local ver = tonumber(f[2] or '0')
if ver ~= tonumber(ARGV[1]) then
  return {0, tonumber(f[1]), 0}
end
local floor = tonumber(ARGV[3])
"#,
    next_version!(),
    r#"redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[2])
return {1, n, counted}
"#
);

/// Adopt a subject the drift check found (see `drift.rs`) if it is still as found (`rev`
/// `ARGV[1]`, `json` `ARGV[2]`, `mac` `ARGV[6]`, empty for none: a pass that adopted it
/// meanwhile signed it): at the next version, with the JSON that says its revision
/// (`ARGV[3]`) and its MAC (`ARGV[4]`), marked `drift` until its rows are written, and in its
/// tenant's index (`ARGV[5]`: its id). Replies as `PUT` (`{0, rev, 0}`: changed meanwhile).
pub(super) const ADOPT: &str = concat!(
    r#"
local f = redis.call('HMGET', KEYS[1], 'rev', 'ver', 'json', 'mac')
if f[1] ~= ARGV[1] or f[3] ~= ARGV[2] or (f[4] or '') ~= ARGV[6] then
  return {0, tonumber(f[1]) or 0, 0}
end
local ver = tonumber(f[2]) or 0
local floor = tonumber(ARGV[7])
"#,
    next_version!(),
    r#"redis.call('HSET', KEYS[1], 'ver', n, 'json', ARGV[3], 'mac', ARGV[4], 'drift', '1')
redis.call('ZADD', KEYS[2], 0, ARGV[5])
return {1, n, counted}
"#
);

/// Drop a subject's drift mark if it is still at version `ARGV[1]`: its rows are written.
pub(super) const UNMARK: &str = r#"
if redis.call('HGET', KEYS[1], 'ver') == ARGV[1] then redis.call('HDEL', KEYS[1], 'drift') end
return 0
"#;

/// The ids of a page of a tenant's index (`KEYS[1]`, from `ARGV[1]`, `ARGV[2]` of them) whose
/// hash (`ARGV[3]` then the id) is gone: `{last id looked at, {gone ids}}`, the last empty at
/// the end of the index. The hashes' keys are not declared: the store needs one Redis, not a
/// Cluster (see the module above).
pub(super) const GONE: &str = r#"
local ids = redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], '+', 'LIMIT', 0, tonumber(ARGV[2]))
local gone = {}
for _, id in ipairs(ids) do
  if redis.call('EXISTS', ARGV[3] .. id) == 0 then table.insert(gone, id) end
end
local last = ''
if #ids == tonumber(ARGV[2]) then last = ids[#ids] end
return {last, gone}
"#;

/// Drop id `ARGV[1]` from its tenant's index (`KEYS[2]`) if its hash (`KEYS[1]`) is still gone.
pub(super) const UNINDEX: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], ARGV[1]) end
return 0
"#;

/// A write script's reply as the compare-and-set's outcome.
pub(super) fn cas(
    key: &str,
    name: &str,
    (written, value, _): (i64, i64, i64),
) -> Result<Cas, StoreError> {
    match (written, u64::try_from(value)) {
        (1, Ok(version)) => Ok(Cas::Written(stamp(name, version))),
        (0, Ok(actual)) => Ok(Cas::Conflict { actual }),
        // Only a write still on its way when its settlement read the subject gets this; the
        // row already says it did not land.
        (2, _) => Err(StoreError::Redis(
            "the change was fenced by its settlement".into(),
        )),
        _ => Err(StoreError::Corrupt {
            what: key.to_owned(),
            detail: "unexpected script reply".into(),
        }),
    }
}

/// How long a fence is kept, in seconds.
pub(super) const FENCE_SECS: u64 = 86_400;
