//! One call of one of the crate's scripts, written straight into the
//! command's buffer.
//!
//! redis-rs's `ScriptInvocation` keeps each key and each argument in a
//! vector of its own and copies them into the command when it is sent: six
//! allocations and their copies for a call of four arguments. A decision
//! makes one such call, so here the call is the command itself
//! (`EVALSHA <sha1> <number of keys> <keys> <arguments>`), and a key is
//! written as its prefix and its name without being joined first.

use std::io::Write;

use ::redis::{Arg, Cmd, RedisWrite, Script, ToRedisArgs, ToSingleRedisArg};

/// One of the crate's Lua scripts: its source, and its SHA-1 computed once.
pub(crate) struct LuaScript {
    source: &'static str,
    script: Script,
}

impl LuaScript {
    pub(crate) fn new(source: &'static str) -> Self {
        Self {
            source,
            script: Script::new(source),
        }
    }
}

/// `EVALSHA` of one script, with its keys and then its arguments; run it
/// with [`RedisConnection::call_script`](super::RedisConnection::call_script).
pub(crate) struct ScriptCall<'s> {
    script: &'s LuaScript,
    command: Cmd,
    keys_left: usize,
    /// Whether the call may be sent again after its connection dropped.
    repeatable: bool,
}

impl<'s> ScriptCall<'s> {
    /// A call of `script` on `keys` keys, which [`key`](Self::key) then
    /// writes, before any [`arg`](Self::arg).
    pub(crate) fn new(script: &'s LuaScript, keys: usize) -> Self {
        // Room for the command's name, the 40-byte hash, the count, two
        // keys of a prefix and a hashed name (Laravel's prefix and a SHA-1
        // take 71 bytes) and four numbers, so that writing them never
        // grows the buffer: a growth copies it, which cost the throttle's
        // call 700 instructions when the room was 128 bytes.
        let mut command = Cmd::with_capacity(10, 256);
        command
            .arg("EVALSHA")
            .arg(script.script.get_hash())
            .arg(keys);
        Self {
            script,
            command,
            keys_left: keys,
            repeatable: false,
        }
    }

    /// Lets the call be sent once more when its connection to one node
    /// drops before the answer. Only for a call whose second run, should
    /// Redis have run the first, can count too much and never too little:
    /// a limit may then refuse early, and never admits more.
    pub(crate) fn repeatable(&mut self, repeatable: bool) -> &mut Self {
        self.repeatable = repeatable;
        self
    }

    /// Whether [`repeatable`](Self::repeatable) allows a second send.
    pub(crate) fn is_repeatable(&self) -> bool {
        self.repeatable
    }

    /// Writes the key `<prefix><name>` as one argument.
    pub(crate) fn key(&mut self, prefix: &str, name: &str) -> &mut Self {
        debug_assert!(self.keys_left > 0, "more keys than the call declared");
        self.keys_left = self.keys_left.saturating_sub(1);
        self.command.arg(PrefixedKey { prefix, name });
        self
    }

    /// Writes one argument, after the keys.
    pub(crate) fn arg(&mut self, arg: impl ToSingleRedisArg) -> &mut Self {
        debug_assert_eq!(self.keys_left, 0, "an argument before the last key");
        self.command.arg(arg);
        self
    }

    /// The same call as `EVAL` of the script's source: for a node that
    /// answered `NOSCRIPT` (restarted, flushed, or new to the cluster). It
    /// goes where the key leads, as the `EVALSHA` did, following redirects
    /// to the node that runs it, and that node compiles the script and
    /// keeps it for the `EVALSHA`s after.
    pub(crate) fn eval_command(&self) -> Cmd {
        let mut eval = Cmd::with_capacity(10, 256 + self.script.source.len());
        eval.arg("EVAL").arg(self.script.source);
        // After `EVALSHA` and the hash: the count, the keys, the arguments.
        for arg in self.command().args_iter().skip(2) {
            if let Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }

    /// The `EVALSHA` command, once every declared key is written.
    pub(crate) fn command(&self) -> &Cmd {
        debug_assert_eq!(self.keys_left, 0, "fewer keys than the call declared");
        &self.command
    }
}

/// A key written as its prefix and its name, one argument, without joining
/// the two in a string of their own first.
struct PrefixedKey<'a> {
    prefix: &'a str,
    name: &'a str,
}

impl ToRedisArgs for PrefixedKey<'_> {
    fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
        let mut argument = out.writer_for_next_arg();
        // The command's buffer is memory, which takes any bytes.
        argument
            .write_all(self.prefix.as_bytes())
            .and_then(|()| argument.write_all(self.name.as_bytes()))
            .expect("a command's buffer takes any bytes");
    }
}

impl ToSingleRedisArg for PrefixedKey<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_evalsha_the_keys_joined_with_their_prefix_and_the_arguments() {
        let script = LuaScript::new("return 1");
        let mut call = ScriptCall::new(&script, 2);
        call.key("app:", "user:1")
            .key("app:", "user:1:timer")
            .arg(60_i64)
            .arg("1");
        let written: Vec<Vec<u8>> = call.command().args_iter().map(arg_bytes).collect();
        let expected: Vec<&[u8]> = vec![
            b"EVALSHA",
            script.script.get_hash().as_bytes(),
            b"2",
            b"app:user:1",
            b"app:user:1:timer",
            b"60",
            b"1",
        ];
        assert_eq!(written, expected);
    }

    #[test]
    fn an_empty_prefix_writes_the_name_alone() {
        let script = LuaScript::new("return 1");
        let mut call = ScriptCall::new(&script, 1);
        call.key("", "k");
        let written: Vec<Vec<u8>> = call.command().args_iter().map(arg_bytes).collect();
        assert_eq!(written[3], b"k");
    }

    #[test]
    fn the_eval_form_sends_the_source_with_the_same_keys_and_arguments() {
        let script = LuaScript::new("return KEYS[1]");
        let mut call = ScriptCall::new(&script, 1);
        call.key("app:", "k").arg(60_i64);
        let written: Vec<Vec<u8>> = call.eval_command().args_iter().map(arg_bytes).collect();
        let expected: Vec<&[u8]> = vec![b"EVAL", b"return KEYS[1]", b"1", b"app:k", b"60"];
        assert_eq!(written, expected);
    }

    fn arg_bytes(arg: ::redis::Arg<&[u8]>) -> Vec<u8> {
        match arg {
            ::redis::Arg::Simple(bytes) => bytes.to_vec(),
            _ => panic!("a script call writes plain arguments only"),
        }
    }
}
