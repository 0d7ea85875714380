/** A step's completion with more than its result: notes, artifacts, context updates, search attributes. */
export class StepResult {
  readonly result: Record<string, unknown> | undefined;
  readonly notes: string;
  readonly artifacts: string[];
  readonly contextUpdates: Record<string, string>;
  readonly searchAttributes: Record<string, string>;

  constructor(fields: {
    result?: Record<string, unknown>;
    notes?: string;
    artifacts?: string[];
    contextUpdates?: Record<string, string>;
    searchAttributes?: Record<string, string>;
  }) {
    this.result = fields.result;
    this.notes = fields.notes ?? "";
    this.artifacts = fields.artifacts ?? [];
    this.contextUpdates = fields.contextUpdates ?? {};
    this.searchAttributes = fields.searchAttributes ?? {};
  }

  /**
   * What a handler's return value completes the step with: a StepResult as is, a plain
   * object as the result, a string as the notes, nothing as an empty completion.
   */
  static from(value: unknown): StepResult {
    if (value instanceof StepResult) return value;
    if (value === undefined || value === null) return new StepResult({});
    if (typeof value === "string") return new StepResult({ notes: value });
    if (typeof value === "object" && !Array.isArray(value)) {
      return new StepResult({ result: value as Record<string, unknown> });
    }
    throw new TypeError(
      `a step handler returns an object (the result), a string (the notes), a StepResult or nothing, not ${
        Array.isArray(value) ? "an array" : typeof value
      }`,
    );
  }
}
