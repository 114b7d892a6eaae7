import type { Policy } from 'floodgate';
import { MAX_OVERRIDE_ID_LENGTH, type Overrides } from 'floodgate/overrides';

/** The descriptor entries whose values name a call's tenant and plan for stored overrides. */
export const TENANT_ENTRY = 'tenant';
export const PLAN_ENTRY = 'plan';

/** What {@link applyOverrides} reads and rewrites of one planned descriptor. */
interface PlannedPolicies {
  readonly kind: string;
  readonly requestLimit?: boolean;
  readonly key: string;
  policies: readonly Policy[] | undefined;
}

/**
 * Resolves the policies of each descriptor the limiter will decide through the stored overrides: the
 * descriptor's key, else the value of its `tenant` entry, else of its `plan` entry. Limits sent with the
 * request (Envoy's descriptor `limit`) stay as sent. A value too long to be an override's target has
 * none. When the overrides cannot be read, the configured policies decide and `onError` hears of it.
 */
export async function applyOverrides(
  overrides: Overrides,
  request: { readonly descriptors: readonly { readonly entries: readonly { key: string; value: string }[] }[] },
  plan: readonly PlannedPolicies[],
  onError?: (error: unknown) => void,
): Promise<void> {
  await Promise.all(
    plan.map(async (p, i) => {
      if (p.kind !== 'policies' || p.requestLimit === true || p.policies === undefined) return;
      const entries = request.descriptors[i]?.entries ?? [];
      const call = {
        key: p.key,
        tenant: targetOf(entries.find((e) => e.key === TENANT_ENTRY)?.value),
        plan: targetOf(entries.find((e) => e.key === PLAN_ENTRY)?.value),
      };
      if (!fits(call.key)) return;
      try {
        p.policies = await overrides.resolve(call, p.policies);
      } catch (error) {
        onError?.(error);
      }
    }),
  );
}

function fits(value: string): boolean {
  return value.length > 0 && value.length <= MAX_OVERRIDE_ID_LENGTH;
}

function targetOf(value: string | undefined): string | undefined {
  return value !== undefined && fits(value) ? value : undefined;
}
