/** Two tenants' calls in flight at once per tenant, beside a generous rate; a rule with a limit alone. */
export const PERMIT_CONFIG = `
domains:
  - domain: llm
    descriptors:
      - key: tenant
        concurrency: { limit: 2, leaseMs: 60000 }
        policies:
          - { algorithm: fixed-window, name: per-tenant, limit: 1000, windowMs: 3600000 }
      - key: model
        value: big
        concurrency: { limit: 1, leaseMs: 60000, name: big-model }
      - key: path
        policies:
          - { algorithm: fixed-window, name: per-path, limit: 1, windowMs: 3600000 }
`;
