// The helpers of the official `openai` npm package that openai-go has no
// equivalent of: zod-parsed structured outputs (chat and Responses, plain
// and streamed), tool runners, and file batches uploaded and polled.
import OpenAI, { toFile } from 'openai';
import { zodFunction, zodResponseFormat, zodResponsesFunction, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { Event, apiKey, baseURL, model, run, valid } from './common.mjs';

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const prompt = 'Plan the launch party for ' + model;

const Weather = z.object({ city: z.string() });

// pollRecorder is a client that records each GET whose path matches re
// (the poll helpers' retrieves): the status it saw and the
// openai-poll-after-ms it was told (without it the helpers wait 5 s
// between polls).
function pollRecorder(re) {
  const polls = [];
  const client = new OpenAI({
    baseURL,
    apiKey,
    maxRetries: 0,
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      if ((init?.method ?? 'GET') === 'GET' && re.test(new URL(url).pathname)) {
        const { status } = await res.clone().json();
        polls.push({ status, poll_after_ms: res.headers.get('openai-poll-after-ms') });
      }
      return res;
    },
  });
  return { client, polls };
}

await run({
  // chat.completions.parse with zodResponseFormat: message.parsed.
  async chat_parse() {
    const c = await client.chat.completions.parse({
      model,
      messages: [{ role: 'user', content: prompt }],
      response_format: zodResponseFormat(Event, 'event'),
    });
    const m = c.choices[0].message;
    return { parsed: m.parsed, valid: valid(m.parsed), refusal: m.refusal, finish_reason: c.choices[0].finish_reason, model: c.model };
  },

  // chat.completions.stream with zodResponseFormat: the final completion
  // of the streamed chunks, parsed.
  async chat_stream_parse() {
    const s = client.chat.completions.stream({
      model,
      messages: [{ role: 'user', content: prompt }],
      response_format: zodResponseFormat(Event, 'event'),
    });
    let chunks = 0;
    for await (const _ of s) chunks++;
    const c = await s.finalChatCompletion();
    const m = c.choices[0].message;
    return { parsed: m.parsed, valid: valid(m.parsed), chunks, finish_reason: c.choices[0].finish_reason };
  },

  // responses.parse with zodTextFormat: output_parsed.
  async responses_parse() {
    const r = await client.responses.parse({
      model,
      input: prompt,
      text: { format: zodTextFormat(Event, 'event') },
    });
    return { parsed: r.output_parsed, valid: valid(r.output_parsed), status: r.status, model: r.model };
  },

  // responses.stream with zodTextFormat: the final response, parsed.
  async responses_stream_parse() {
    const s = client.responses.stream({
      model,
      input: prompt,
      text: { format: zodTextFormat(Event, 'event') },
    });
    const types = new Set();
    for await (const ev of s) types.add(ev.type);
    const r = await s.finalResponse();
    return { parsed: r.output_parsed, valid: valid(r.output_parsed), status: r.status, events: [...types].sort() };
  },

  // chat.completions.parse with a strict zodFunction tool: the call's
  // parsed_arguments.
  async chat_parse_tool() {
    const c = await client.chat.completions.parse({
      model,
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      tools: [zodFunction({ name: 'get_weather', parameters: Weather })],
    });
    const m = c.choices[0].message;
    return {
      finish_reason: c.choices[0].finish_reason,
      calls: (m.tool_calls ?? []).map((tc) => ({ name: tc.function.name, parsed_arguments: tc.function.parsed_arguments })),
    };
  },

  // responses.parse with a zodResponsesFunction tool: the function_call
  // item's parsed_arguments.
  async responses_parse_tool() {
    const r = await client.responses.parse({
      model,
      input: 'What is the weather in Paris?',
      tools: [zodResponsesFunction({ name: 'get_weather', parameters: Weather })],
    });
    return {
      status: r.status,
      calls: r.output.filter((o) => o.type === 'function_call').map((o) => ({ name: o.name, parsed_arguments: o.parsed_arguments })),
    };
  },

  // runTools: the runner calls the function with the model's arguments,
  // sends its result back and returns the model's final answer.
  async run_tools() {
    const called = [];
    const runner = client.chat.completions.runTools({
      model,
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      tools: [
        zodFunction({
          name: 'get_weather',
          parameters: Weather,
          function: (args) => {
            called.push(args);
            return 'sunny, 21C';
          },
        }),
      ],
    });
    const content = await runner.finalContent();
    return { called, content, messages: runner.messages.map((m) => m.role) };
  },

  // runTools streaming: the same loop over streamed chunks.
  async run_tools_stream() {
    const called = [];
    const runner = client.chat.completions.runTools({
      model,
      stream: true,
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      tools: [zodFunction({ name: 'get_weather', parameters: Weather, function: (args) => (called.push(args), 'sunny, 21C') })],
    });
    let chunks = 0;
    for await (const _ of runner) chunks++;
    return { called, content: await runner.finalContent(), chunks };
  },

  // vectorStores.files.uploadAndPoll: one file uploaded, attached and
  // polled to its end.
  async file_upload() {
    const { client, polls } = pollRecorder(/^\/v1\/vector_stores\/[^/]+\/files\/[^/]+$/);
    const vs = await client.vectorStores.create({ name: 'npm ' + model });
    const f = await client.vectorStores.files.uploadAndPoll(vs.id, await toFile(Buffer.from('Tides follow the moon.\n'), 'tides.txt'));
    return { object: f.object, status: f.status, vector_store_id: f.vector_store_id === vs.id, polls };
  },

  // vectorStores.fileBatches.uploadAndPoll: two files uploaded, one batch,
  // polled to its end; then the batch's files and a search.
  async file_batch() {
    const { client, polls } = pollRecorder(/\/file_batches\/[^/]+$/);
    const vs = await client.vectorStores.create({ name: 'npm ' + model });
    const files = [
      await toFile(Buffer.from('The aurora borealis is seen near the Arctic circle.\n'), 'aurora.txt'),
      await toFile(Buffer.from('Sourdough bread needs a starter, flour, water and salt.\n'), 'bread.txt'),
    ];
    const b = await client.vectorStores.fileBatches.uploadAndPoll(vs.id, { files });
    const listed = [];
    for await (const f of client.vectorStores.fileBatches.listFiles(b.id, { vector_store_id: vs.id })) {
      listed.push({ id: f.id, status: f.status });
    }
    const names = {};
    for (const f of listed) names[f.id] = (await client.files.retrieve(f.id)).filename;
    const hits = [];
    for await (const h of client.vectorStores.search(vs.id, { query: 'sourdough starter' })) {
      hits.push({ filename: h.filename, text: h.content.map((c) => c.text).join('') });
    }
    return {
      object: b.object,
      status: b.status,
      file_counts: b.file_counts,
      vector_store_id: b.vector_store_id === vs.id,
      files: listed.map((f) => ({ filename: names[f.id], status: f.status })).sort((x, y) => x.filename.localeCompare(y.filename)),
      top_hit: hits[0] ?? null,
      polls,
    };
  },
});
