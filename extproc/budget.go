package extproc

import (
	"fmt"
	"net/http"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/switchyard-ai/switchyard/internal/apierror"
	"github.com/switchyard-ai/switchyard/internal/usage"
)

// TypeInsufficientQuota is OpenAI's error type (and code) for a spent quota.
const TypeInsufficientQuota = "insufficient_quota"

// checkBudget refuses the request of a key whose monthly spend budget is
// spent: when the month-to-date spend of its rotation chain plus the
// request's smallest possible cost (the prompt estimate at the model's
// lower input price, no output) exceeds the budget. The spend counts every
// request that has ended (Budgets); requests still running are charged
// when they end, so the budget can be overshot by what the requests
// admitted before it ran out go on to cost (docs/operations.md). It returns
// nil to go on.
func (st *stream) checkBudget(prompt int64) *extprocv3.ProcessingResponse {
	budget := st.key.MonthlyBudget
	if st.srv.budgets == nil || budget <= 0 {
		return nil
	}
	now := time.Now()
	id := st.key.LimitID()
	spent := st.srv.budgets.MonthSpend(id, now)
	least := min(st.pricing.CostMicros(prompt, 0, 0), st.pricing.CostMicros(prompt, prompt, 0))
	st.budgetAlert(id, spent, budget, now)
	if spent+least <= budget && spent < budget {
		return nil
	}
	st.srv.limits.metrics.Limited.Inc(TypeInsufficientQuota, st.key.Tier)
	st.srv.log.Info("extproc: monthly budget spent", "request_id", st.requestID, "key_id", st.key.ID,
		"spent_usd", usage.USD(spent), "budget_usd", usage.USD(budget))
	return immediate(&apierror.Error{Status: http.StatusTooManyRequests, Type: TypeInsufficientQuota, Code: TypeInsufficientQuota,
		Message: fmt.Sprintf("You exceeded your current quota: API key %s has spent $%s of its monthly budget of $%s. "+
			"The budget renews on the first of next month (UTC); ask your gateway administrator to raise it.",
			st.key.ID, usage.USD(spent), usage.USD(budget))},
		// Retrying cannot help before the month ends or the budget is
		// raised; the OpenAI SDKs honour this over their 429 retries.
		"x-should-retry", "false")
}

// budgetAlert logs, once per key (rotation chain) and month in this
// process, that the spend has passed the key's alert ratio of its budget.
func (st *stream) budgetAlert(limitID string, spent, budget int64, now time.Time) {
	if float64(spent) < st.key.AlertRatio()*float64(budget) {
		return
	}
	// One entry per key: the month of its last alert.
	month := usage.MonthStart(now)
	if prev, loaded := st.srv.alerted.LoadOrStore(limitID, month); loaded {
		if prev == month || !st.srv.alerted.CompareAndSwap(limitID, prev, month) {
			return
		}
	}
	st.srv.limits.metrics.BudgetAlerts.Inc(st.key.Tier)
	st.srv.log.Warn("extproc: key passed its budget alert threshold", "key_id", st.key.ID, "limit_id", limitID,
		"spent_usd", usage.USD(spent), "budget_usd", usage.USD(budget), "alert_ratio", st.key.AlertRatio())
}
