// The Vercel AI SDK (`ai` with the `@ai-sdk/openai` provider pointed at
// the gateway): generateObject (an object, an array, an enum, schemaless
// JSON), streamObject, streamText and a tool loop, each through both of
// the provider's APIs: the Responses API (its default) and Chat
// Completions (`openai.chat`); and embedMany on the demo embedding model.
import { createOpenAI } from '@ai-sdk/openai';
import { embedMany, generateObject, generateText, stepCountIs, streamObject, streamText, tool } from 'ai';
import { z } from 'zod';
import { Event, apiKey, baseURL, model, run, valid } from './common.mjs';

const openai = createOpenAI({ baseURL, apiKey });
const apis = { responses: openai.responses(model), chat: openai.chat(model) };
const prompt = 'Plan the launch party for ' + model;

const steps = {};
for (const [api, m] of Object.entries(apis)) {
  steps[`generate_object_${api}`] = async () => {
    const r = await generateObject({ model: m, schema: Event, prompt, maxRetries: 0 });
    return { object: r.object, valid: valid(r.object), finish_reason: r.finishReason, output_tokens: r.usage.outputTokens };
  };
  steps[`generate_array_${api}`] = async () => {
    const r = await generateObject({ model: m, output: 'array', schema: Event, prompt, maxRetries: 0 });
    return { object: r.object, valid: r.object.map(valid) };
  };
  steps[`generate_enum_${api}`] = async () => {
    const r = await generateObject({ model: m, output: 'enum', enum: ['red', 'blue'], prompt, maxRetries: 0 });
    return { object: r.object };
  };
  // no-schema: JSON mode (json_object), any JSON object.
  steps[`generate_json_${api}`] = async () => {
    const r = await generateObject({ model: m, output: 'no-schema', prompt, maxRetries: 0 });
    return { object: r.object };
  };
  steps[`stream_object_${api}`] = async () => {
    const r = streamObject({ model: m, schema: Event, prompt, maxRetries: 0 });
    let partials = 0;
    for await (const _ of r.partialObjectStream) partials++;
    const object = await r.object;
    return { object, valid: valid(object), partials, finish_reason: await r.finishReason };
  };
  steps[`stream_text_${api}`] = async () => {
    let error;
    const r = streamText({ model: m, prompt: 'hello ' + model, maxRetries: 0, onError: ({ error: e }) => { error = e; } });
    let deltas = 0;
    for await (const _ of r.textStream) deltas++;
    if (error) throw error;
    const usage = await r.usage;
    return { text: await r.text, deltas, finish_reason: await r.finishReason, output_tokens: usage.outputTokens };
  };
  steps[`tools_${api}`] = async () => {
    const called = [];
    const r = await generateText({
      model: m,
      prompt: 'What is the weather in Paris?',
      maxRetries: 0,
      stopWhen: stepCountIs(3),
      tools: {
        get_weather: tool({
          description: 'The weather in a city',
          inputSchema: z.object({ city: z.string() }),
          execute: async (args) => {
            called.push(args);
            return 'sunny, 21C';
          },
        }),
      },
    });
    return { called, text: r.text, steps: r.steps.length, finish_reason: r.finishReason };
  };
}

steps.embed_many = async () => {
  const r = await embedMany({ model: openai.embedding('demo/embed'), values: ['one', 'two'], maxRetries: 0 });
  return { embeddings: r.embeddings.length, dimensions: r.embeddings.map((e) => e.length), differ: r.embeddings[0].some((x, i) => x !== r.embeddings[1][i]), tokens: r.usage.tokens };
};

await run(steps);
