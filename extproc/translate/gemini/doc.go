// Package gemini translates OpenAI chat completions and embeddings to and from Google's Gemini API.
//
// The gateway validates an OpenAI request, then for a provider of kind
// "gemini" rewrites it with TranslateRequest, sends it to ChatPath (relative
// to the provider's base URL, e.g. https://generativelanguage.googleapis.com)
// with Headers, and turns the answer back into OpenAI's shape with
// TranslateResponse, or chunk by chunk with a Stream. Embeddings go through
// TranslateEmbeddingRequest, EmbedPath and TranslateEmbeddingResponse.
//
// Bodies are read in place with gjson and written by appending bytes: message
// contents (images as data URLs) can be megabytes, and string values are
// copied as raw JSON wherever OpenAI and Gemini encode them alike.
//
// # Requests
//
//   - system and developer messages become systemInstruction (text only; their
//     position in the conversation is lost, as Gemini has one instruction). A
//     conversation of system messages only is sent as one user turn instead,
//     as Gemini needs at least one content.
//   - user becomes role "user", assistant role "model"; consecutive messages
//     that land in the same role are merged into one turn (tool results keep a
//     turn of their own). Message "name" fields are dropped: Gemini has no
//     participant names.
//   - Content parts: text; image_url with a base64 data: URL becomes
//     inlineData, an http(s) or gs:// URL becomes fileData with a MIME type
//     guessed from the file extension (image/jpeg when there is none); input_audio
//     becomes inlineData audio/wav or audio/mp3; file with file_data becomes
//     inlineData (file_id is unsupported: Gemini cannot read OpenAI files).
//     Empty text is skipped, as Gemini rejects empty text parts.
//   - assistant tool_calls become functionCall parts whose args is the parsed
//     arguments object; tool messages become functionResponse parts named
//     after the matching earlier tool call, with response
//     {"content": <the JSON object or array the text holds, else the text>}.
//     Consecutive tool messages are grouped into one user turn, as Gemini
//     requires as many responses in a turn as the calls before it.
//   - tools become one tool with functionDeclarations; parameters are converted
//     like response schemas (below) and omitted when they declare no
//     properties, since Gemini rejects an OBJECT without properties.
//   - tool_choice: auto → AUTO, none → NONE, required → ANY, a named function
//     → ANY with allowedFunctionNames, allowed_tools with mode required → ANY
//     with the listed names.
//   - temperature, top_p (topP), max_tokens / max_completion_tokens (the smaller
//     wins; maxOutputTokens), stop (stopSequences, up to 5), n (candidateCount),
//     presence_penalty, frequency_penalty and seed go to generationConfig;
//     reasoning_effort becomes thinkingConfig.thinkingBudget (none and minimal
//     0, low 1024, medium 8192, high 24576, the budgets Google's own OpenAI
//     compatibility layer uses).
//   - response_format json_object sets responseMimeType application/json;
//     json_schema also sets responseSchema, converted from JSON Schema to
//     Gemini's OpenAPI subset: type (upper-cased; ["T","null"] becomes T with
//     nullable), properties (plus propertyOrdering in declaration order, as
//     Gemini otherwise orders keys alphabetically), items, anyOf (oneOf is
//     treated as anyOf; {"type":"null"} alternatives become nullable, and a
//     single remaining alternative is merged in), enum of strings, const string (as a one-value enum),
//     required, nullable, description, title, minimum, maximum, minItems,
//     maxItems, minLength, maxLength, minProperties, maxProperties, pattern,
//     example, default, propertyOrdering; local $ref into $defs or definitions
//     is inlined (recursive schemas are unsupported). format is kept only
//     where Gemini accepts it (enum and date-time for strings, float and double,
//     int32 and int64) and dropped otherwise, as are annotations ($schema, $id,
//     $comment, examples, deprecated, readOnly, writeOnly) and
//     additionalProperties: false (Gemini never adds undeclared properties).
//     Other keywords are unsupported.
//   - Ignored as having no effect on the answer: model and stream (they are
//     in the path), stream_options (Gemini always reports usage), user,
//     safety_identifier, prompt_cache_key, metadata, store false, service_tier
//     auto or default, logprobs false, parallel_tool_calls true, modalities
//     ["text"], empty logit_bias. Every other parameter (logprobs, top_logprobs,
//     logit_bias, audio, prediction, web_search_options, verbosity, functions,
//     parallel_tool_calls false, ...) is a 400 unsupported_parameter naming it,
//     unless Options.DropUnsupported, which drops it (and likewise drops
//     unsupported content parts, tools and schema keywords).
//
// # Responses
//
// Candidates become choices (index kept; Gemini omits index 0). Text parts
// are joined; thought parts (thinking summaries) and other part kinds are
// left out. functionCall parts become tool_calls with ids "call_" + a hash of
// the response id, candidate index, call position, name and arguments, so the
// JSON and the streamed translation of the same answer give the same ids.
// finishReason STOP becomes stop (tool_calls when the candidate called
// functions), MAX_TOKENS length, SAFETY, RECITATION, PROHIBITED_CONTENT,
// BLOCKLIST, SPII and IMAGE_SAFETY content_filter, anything else stop. A prompt
// blocked before generation (promptFeedback.blockReason, no candidates) is
// answered with one choice, content null, finish_reason content_filter.
// usageMetadata becomes usage: prompt_tokens is promptTokenCount plus
// toolUsePromptTokenCount, completion_tokens candidatesTokenCount plus
// thoughtsTokenCount (Gemini bills thinking as output, and OpenAI counts
// reasoning tokens within completion tokens), with cached_tokens and
// reasoning_tokens in the details.
//
// # Errors
//
// Every error produced is an *apierror.Error. Gemini's error body
// {"error":{"code","message","status","details"}} keeps its HTTP status and
// message, with type and code from its status: RESOURCE_EXHAUSTED is a 429
// rate_limit_exceeded (type tokens when the quota is a token quota, else
// requests) whose retry-after comes from RetryInfo; INVALID_ARGUMENT,
// FAILED_PRECONDITION and OUT_OF_RANGE are invalid_request_error; NOT_FOUND
// naming a model is model_not_found for the client's model name. The code is
// otherwise the lower-cased Gemini status. UNAUTHENTICATED, PERMISSION_DENIED
// and an invalid API key (Gemini answers that one with 400 INVALID_ARGUMENT,
// reason API_KEY_INVALID) concern the gateway's provider credential, not the
// client's key: they become a 502 server_error with code
// upstream_authentication_failed and a generic message, so clients neither
// blame their own key nor see the upstream's message, which can quote the
// credential.
package gemini
