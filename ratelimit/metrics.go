package ratelimit

import (
	"io"

	"github.com/switchyard-ai/switchyard/internal/metrics"
)

// Metrics counts rate-limiting outcomes, exported in the Prometheus text
// format by the admin listener's /metrics. Create it with NewMetrics.
type Metrics struct {
	// Limited counts requests refused with 429, by type (requests, tokens,
	// or insufficient_quota for a spent monthly budget) and tier.
	Limited *metrics.CounterVec
	// LimiterErrors counts admissions the limiter could not decide (it was
	// unreachable, failed, or had no limit for the key's tier), by tier and
	// the action the tier's failure mode took (allowed or denied).
	LimiterErrors *metrics.CounterVec
	// ChargeErrors counts token charges at stream end that failed, so those
	// tokens were not counted against the key.
	ChargeErrors *metrics.CounterVec
	// BudgetAlerts counts keys that passed their budget alert threshold,
	// once per key, month and process, by tier.
	BudgetAlerts *metrics.CounterVec
}

// NewMetrics returns zeroed counters.
func NewMetrics() *Metrics {
	return &Metrics{
		Limited: metrics.NewCounterVec("switchyard_ratelimit_limited_total",
			"Requests refused with 429 by the rate limits.", "type", "tier"),
		LimiterErrors: metrics.NewCounterVec("switchyard_ratelimit_limiter_errors_total",
			"Admissions the rate limiter could not decide, by the action the tier's on_limiter_error took.", "tier", "action"),
		ChargeErrors: metrics.NewCounterVec("switchyard_ratelimit_charge_errors_total",
			"Token usage charges at stream end that failed (those tokens were not counted).", "source"),
		BudgetAlerts: metrics.NewCounterVec("switchyard_budget_alerts_total",
			"Keys that passed their monthly budget's alert threshold (once per key, month and process).", "tier"),
	}
}

// WritePrometheus writes every counter in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) error {
	if m == nil {
		return nil
	}
	for _, c := range []*metrics.CounterVec{m.Limited, m.LimiterErrors, m.ChargeErrors, m.BudgetAlerts} {
		if err := c.WritePrometheus(w); err != nil {
			return err
		}
	}
	return nil
}
