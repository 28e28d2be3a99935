// Package anthropic translates OpenAI chat completions to and from Anthropic's
// Messages API, so that a provider of kind "anthropic" can serve clients that
// speak OpenAI.
//
// Extproc validates the client's OpenAI request, then calls TranslateRequest
// for the upstream body, Path and Headers for where and how to send it, and
// TranslateResponse (JSON) or a Stream (SSE, chunk by chunk as it arrives) to
// turn the reply back into OpenAI's wire format.
//
// All three work on raw bytes with gjson and append their output: a request can
// carry megabytes of conversation and images, and string values (text, base64
// image data, tool arguments) are copied as raw JSON rather than decoded and
// re-encoded. A Stream reuses its buffers, so translating a text delta does not
// allocate.
//
// # Requests
//
// system and developer messages, wherever they occur, become the top-level
// system prompt (a string for a single string message, text blocks otherwise),
// as Anthropic has no system role inside the conversation. Consecutive messages
// of one role are merged into one turn, and tool messages become tool_result
// blocks in a user turn, because Anthropic wants user and assistant turns to
// alternate with each tool_use answered in the next turn. max_tokens is
// required by Anthropic; max_completion_tokens wins over max_tokens, and
// Options.DefaultMaxTokens (4096 when zero) fills in when neither is sent.
//
// Parameters Anthropic cannot honour are a 400 naming the parameter (code
// unsupported_parameter or unsupported_value) unless Options.DropUnsupported,
// when they are dropped instead:
//
//   - n > 1, presence_penalty or frequency_penalty other than 0, logprobs true,
//     top_logprobs > 0, a non-empty logit_bias, a response_format json_schema
//     whose root is not an object, audio or an "audio" modality, reasoning_effort,
//     web_search_options, the deprecated functions and function_call,
//     tool_choice allowed_tools or custom, custom (non-function) tools, and
//     input_audio, file (other than PDF file_data) and unsupported image parts.
//   - temperature above 1: OpenAI's range is 0 to 2, Anthropic's 0 to 1, and
//     rescaling would silently change what every client asked for, so values
//     above 1 are refused; with DropUnsupported they are clamped to 1, the
//     nearest value Anthropic accepts.
//
// Parameters that are hints, best effort or bookkeeping in OpenAI's own API are
// dropped silently, because ignoring them keeps their contract: seed (OpenAI
// documents determinism as best effort), service_tier, store, metadata,
// prediction, prompt_cache_key, verbosity, stream_options (a Stream always ends
// with a usage chunk; extproc removes it when the client did not ask), and
// function.strict on tools (the schema is still sent as input_schema). user
// (or safety_identifier) becomes metadata.user_id and parallel_tool_calls false
// becomes disable_parallel_tool_use.
//
// # Structured outputs
//
// response_format json_schema and json_object are sent as a tool the model
// is made to call, StructuredTool ("json_response"), whose input_schema is
// the client's schema (json_object, or json_schema without a schema: an
// object with additionalProperties true): the Messages API
// (anthropic-version 2023-06-01, no beta header) has no response format, but
// a forced tool's input follows its schema. json_schema's description
// describes the tool; a schema without "type" gets "object", and a root of
// another type is refused (Anthropic's input_schema must be an object, as
// OpenAI's strict mode wants too). tool_choice is {"type":"tool","name":
// "json_response"} (with disable_parallel_tool_use, so there is one answer)
// when the client sent no tools or tool_choice "none"; with
// the client's tools and tool_choice absent, "auto" or "required" it is
// "any" (the model calls one of the client's functions or answers through
// the tool, which is how OpenAI's "call a tool or answer in the format"
// behaves; "required" thus lets the model answer instead), and a named
// function stays forced. A client function named json_response is refused
// (param tools[i].function.name) while response_format asks for JSON.
//
// TranslateChatReply marks such a request (Reply.Structured), and the
// marked Reply's Translate and NewStream turn the json_response tool_use
// back into the answer: its input becomes message.content, a JSON string
// (streamed, each input_json_delta becomes a content delta), no tool call is
// shown, and stop_reason tool_use becomes finish_reason "stop" unless the
// model also called a client's function. max_tokens still gives "length"
// (the JSON is then cut short, as OpenAI's would be). Text blocks, which
// Anthropic does not write before a forced tool call, are kept as content.
//
// # Prompt caching
//
// Anthropic caches a prompt prefix only up to the cache_control breakpoints a
// request marks (at most 4), and only from a minimum length (1024 tokens for
// most models); cache reads are billed at a tenth of the input price. Unless
// Options.NoCacheControl, TranslateRequest adds {"type":"ephemeral"}
// breakpoints where the prefix up to them (in Anthropic's order: tools,
// system, messages) reaches Options.CacheMinTokens, estimated at 4 bytes a
// token over the request's JSON: in order of value while the budget lasts,
// the last system block (a string system prompt then becomes one text
// block), the last block before the newest user turn (the conversation so
// far, which the next turn repeats; a tool_result turn counts as a user
// turn), and the last tool. cache_control on a client's content parts (text,
// image, file; user, assistant, system and developer messages) is kept on
// the block the part becomes and counts against the 4; a block that carries
// the client's gets no second one. Tool message parts drop theirs.
//
// # Responses
//
// Text blocks are joined into message.content and tool_use blocks become
// tool_calls; thinking and server-tool blocks have no OpenAI counterpart and
// are left out. stop_reason end_turn, stop_sequence and pause_turn map to
// "stop", max_tokens and model_context_window_exceeded to "length", tool_use to
// "tool_calls", refusal to "content_filter". prompt_tokens counts
// input_tokens plus both kinds of cache tokens (Anthropic reports them apart;
// OpenAI's prompt_tokens includes cached ones), with cache reads as
// prompt_tokens_details.cached_tokens.
//
// Anthropic errors become OpenAI error bodies keeping the message; the HTTP
// status is the caller's to pass through (529 stays a 5xx, which the SDKs
// retry). A returned error is always an *apierror.Error (possibly wrapped) that
// the caller should answer the client with instead.
package anthropic
