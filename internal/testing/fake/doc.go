// Package fake provides fake LLM vendor upstreams for tests and the offline
// demo. Each fake speaks its vendor's real wire format, so whatever talks to it
// (the gateway, the official SDKs) exercises the same code paths as against the
// real service; only the "model" is fake.
//
// NewOpenAI, NewAnthropic and NewGemini are the fakes of each wire format;
// Handler and Start pick one by its config kind ("openai", "anthropic",
// "gemini"). The OpenAI-compatible fake defines the replies, which the
// others render in their vendors' formats. Replies are deterministic and
// derived only from the request:
//
//   - The reply to the last user message is "Echo: <its text>"; choice i>0 is
//     prefixed "(choice i) ". After a tool result message (role "tool") the
//     reply is "The tool returned: <its text>".
//   - With function tools and tool_choice not "none", the reply is one call to
//     the first function (or the one tool_choice names, even after a tool
//     result, which is otherwise answered in text), with arguments built
//     from the function's parameters schema: string "sample", number and
//     integer 1, boolean true, nested objects and arrays filled in the same
//     way (see structured output below).
//   - Structured output: with response_format json_schema (OpenAI), the
//     responseMimeType application/json and responseSchema (Gemini), or a
//     forced tool (Anthropic, which is how the gateway asks it for JSON), the
//     reply is a JSON value that validates against the schema: every declared
//     property, strings "sample" (a valid example for the common formats,
//     lengths met), numbers and integers 1 (moved into minimum and maximum),
//     booleans true, enum and const their first value, arrays one item (or
//     minItems), anyOf and oneOf their first branch, allOf merged, $ref
//     followed into $defs. json_object (or JSON without a schema) answers
//     {"answer": "<the last user message>"}. The JSON is indented, so it
//     streams in several chunks and counts several tokens; "(choice i)"
//     prefixes are left out.
//   - stop cuts the text before the first stop sequence (finish_reason "stop");
//     max_tokens / max_completion_tokens truncate it (finish_reason "length").
//   - Tokens are whitespace-separated words. prompt_tokens counts the words of
//     every message's text content, at least 1 per message (tool definitions
//     are not counted); completion_tokens counts the words of the generated
//     text, and a tool call counts 1 for its name plus 1 per argument.
//
// Streaming follows OpenAI's chunk sequence: a role chunk, one chunk per word
// (with its leading space), a finish_reason chunk per choice, an optional usage
// chunk, then [DONE].
//
// Prompt caching (Options.PromptCache, off by default) models the vendors'
// prompt caches, per fake instance, in a bounded LRU of prefix hashes
// (CacheOptions.Entries). Prefixes end at message boundaries (OpenAI) or
// content blocks (Anthropic) and are counted in the fake's tokens; only
// prefixes of at least CacheOptions.MinTokens (default 1024) are cached,
// and only requests that are answered store theirs. Deterministic: the same
// requests in the same order get the same usage.
//
//   - OpenAI caches automatically: a prompt whose longest prefix (the model,
//     the tools, then messages) was seen reports that prefix's tokens as
//     usage.prompt_tokens_details.cached_tokens (reported, 0 or more, on
//     every reply while caching is on).
//   - Anthropic caches only at cache_control breakpoints (in its order:
//     tools, system, messages; a block is compared without its
//     cache_control): a breakpoint reads the longest prefix cached at it or
//     up to 20 blocks before it (cache_read_input_tokens), and the prompt up
//     to the last cacheable breakpoint beyond that is written
//     (cache_creation_input_tokens, on the first request that marks it).
//     input_tokens is the rest. A request without breakpoints caches nothing.
//
// A cached share s of the prompt's tokens shortens the wait before the first
// byte from ServiceTime to ServiceTime + s*(CachedServiceTime-ServiceTime).
//
// Faults and load shapes are injected per request with the x-fake-* headers
// (see HeaderStatus and friends) or for every request with Options.Fault; the
// headers win.
package fake
