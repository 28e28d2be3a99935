// LangChain (`@langchain/openai`'s ChatOpenAI pointed at the gateway):
// withStructuredOutput by each of its methods, on Chat Completions and on
// the Responses API, a plain invoke and a stream; OpenAIEmbeddings on the
// demo embedding model.
import { ChatOpenAI, OpenAIEmbeddings } from '@langchain/openai';
import { z } from 'zod';
import { Event, apiKey, baseURL, model, run, valid } from './common.mjs';

const chat = (useResponsesApi) =>
  new ChatOpenAI({ model, apiKey, configuration: { baseURL }, maxRetries: 0, useResponsesApi });
const prompt = 'Plan the launch party for ' + model;

const steps = {};
for (const [api, useResponsesApi] of Object.entries({ chat: false, responses: true })) {
  // jsonSchema: response_format / text.format; functionCalling: a forced
  // tool with the schema.
  for (const method of ['jsonSchema', 'functionCalling']) {
    steps[`structured_${method}_${api}`] = async () => {
      const object = await chat(useResponsesApi).withStructuredOutput(Event, { name: 'event', method, strict: true }).invoke(prompt);
      return { object, valid: valid(object) };
    };
  }
  steps[`structured_jsonMode_${api}`] = async () => {
    const object = await chat(useResponsesApi).withStructuredOutput(z.object({ answer: z.string() }), { method: 'jsonMode' }).invoke('Answer in JSON. ' + prompt);
    return { object };
  };
  steps[`invoke_${api}`] = async () => {
    const m = await chat(useResponsesApi).invoke('hello ' + model);
    return { text: m.text, output_tokens: m.usage_metadata?.output_tokens };
  };
  steps[`stream_${api}`] = async () => {
    let text = '';
    let chunks = 0;
    for await (const c of await chat(useResponsesApi).stream('hello ' + model)) {
      text += c.text;
      chunks++;
    }
    return { text, chunks };
  };
}

steps.embed_documents = async () => {
  const v = await new OpenAIEmbeddings({ model: 'demo/embed', apiKey, configuration: { baseURL }, maxRetries: 0 }).embedDocuments(['one', 'two']);
  return { embeddings: v.length, dimensions: v.map((e) => e.length) };
};

await run(steps);
