package usage

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"strconv"
)

// Formats WriteRows writes.
const (
	FormatJSON = "json"
	FormatCSV  = "csv"
)

// rowJSON is a Row as the admin endpoint and the CLI print it: the cost in
// micro-dollars and as an exact decimal of dollars.
type rowJSON struct {
	Row
	CostUSD json.Number `json:"cost_usd"`
}

// USD renders micro-dollars as an exact decimal of dollars ("0.000050").
func USD(micros int64) string {
	sign := ""
	if micros < 0 {
		sign, micros = "-", -micros
	}
	frac := strconv.FormatInt(micros%1e6+1e6, 10)[1:]
	return sign + strconv.FormatInt(micros/1e6, 10) + "." + frac
}

// WriteRows writes rows as JSON ({"object":"list","data":[...]}) or CSV
// (a header line, then one line a row).
func WriteRows(w io.Writer, format string, rows []Row) error {
	if format == FormatCSV {
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"day", "key_id", "limit_id", "model", "requests", "input_tokens", "cached_tokens",
			"output_tokens", "errors", "cost_micros", "cost_usd"})
		for _, r := range rows {
			_ = cw.Write([]string{r.Day, r.KeyID, r.LimitID, r.Model, itoa(r.Requests), itoa(r.InputTokens),
				itoa(r.CachedTokens), itoa(r.OutputTokens), itoa(r.Errors), itoa(r.CostMicros), USD(r.CostMicros)})
		}
		cw.Flush()
		return cw.Error()
	}
	out := struct {
		Object string    `json:"object"`
		Data   []rowJSON `json:"data"`
	}{Object: "list", Data: make([]rowJSON, 0, len(rows))}
	for _, r := range rows {
		out.Data = append(out.Data, rowJSON{Row: r, CostUSD: json.Number(USD(r.CostMicros))})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
