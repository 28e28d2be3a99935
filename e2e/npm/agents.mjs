// The OpenAI Agents SDK (`@openai/agents`, on the `openai` client pointed
// at the gateway): an agent with a zod outputType, an agent calling a
// function tool (plain and streamed), through the Responses API (its
// default) and through Chat Completions.
import { Agent, OpenAIProvider, Runner, setTracingDisabled, tool } from '@openai/agents';
import OpenAI from 'openai';
import { z } from 'zod';
import { Event, apiKey, baseURL, model, run, valid } from './common.mjs';

// Traces would go to OpenAI's own tracing endpoint, not the gateway.
setTracingDisabled(true);

const openAIClient = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const prompt = 'Plan the launch party for ' + model;

const steps = {};
for (const [api, useResponses] of Object.entries({ responses: true, chat: false })) {
  const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient, useResponses }), tracingDisabled: true });
  steps[`output_type_${api}`] = async () => {
    const agent = new Agent({ name: 'planner', instructions: 'Plan events.', model, outputType: Event });
    const r = await runner.run(agent, prompt);
    return { output: r.finalOutput, valid: valid(r.finalOutput) };
  };
  const agentWithTool = (called) =>
    new Agent({
      name: 'weather',
      instructions: 'Answer with the weather.',
      model,
      tools: [
        tool({
          name: 'get_weather',
          description: 'The weather in a city',
          parameters: z.object({ city: z.string() }),
          execute: async (args) => {
            called.push(args);
            return 'sunny, 21C';
          },
        }),
      ],
    });
  steps[`tools_${api}`] = async () => {
    const called = [];
    const r = await runner.run(agentWithTool(called), 'What is the weather in Paris?');
    return { called, output: r.finalOutput };
  };
  steps[`tools_stream_${api}`] = async () => {
    const called = [];
    const s = await runner.run(agentWithTool(called), 'What is the weather in Paris?', { stream: true });
    let deltas = 0;
    for await (const _ of s.toTextStream()) deltas++;
    await s.completed;
    if (s.error) throw s.error;
    return { called, output: s.finalOutput, deltas };
  };
}

await run(steps);
