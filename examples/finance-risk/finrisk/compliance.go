package finrisk

// Rule flags raised by the compliance engine.
const (
	FlagOverCommitted = 1 << iota // installment at 4% of disposable income and monthly payment above MaxMonthly
	FlagAmountLimit               // credit amount above MaxAmount (hard limit: veto)
	FlagDurationLimit             // duration above MaxDuration months (hard limit: veto)
	FlagManyCredits               // MaxCredits or more existing credits
	FlagNoBuffer                  // overdrawn checking, under 100 DM savings and amount above NoBufferAmount
	NumRuleFlags      = 5
)

// Compliance is the rule engine of the compliance agent: affordability
// limits that flag or veto an approval, and the fairness rule that a
// decision must not change when a protected attribute (sex or age group)
// alone changes.
type Compliance struct {
	Data           *Credit
	MaxAmount      float64 // hard limit on the credit amount (DM)
	MaxDuration    float64 // hard limit on the duration (months)
	MaxMonthly     float64 // monthly payment (DM) above which a 4% installment rate is over-commitment
	MaxCredits     float64 // existing credits at or above which the applicant is flagged
	NoBufferAmount float64 // amount (DM) above which no buffer (overdrawn, no savings) is flagged
}

// NewCompliance returns the engine with the default limits.
func NewCompliance(c *Credit) *Compliance {
	return &Compliance{Data: c, MaxAmount: 15000, MaxDuration: 60, MaxMonthly: 400, MaxCredits: 4, NoBufferAmount: 5000}
}

// Verdict is the engine's judgement of one application.
type Verdict struct {
	Flags int  // bit set of Flag* values
	Veto  bool // a hard limit is exceeded: the application must not be approved
}

// Count is the number of raised flags.
func (v Verdict) Count() int {
	n := 0
	for f := v.Flags; f != 0; f &= f - 1 {
		n++
	}
	return n
}

// Check applies the affordability rules to a raw row.
func (e *Compliance) Check(row []float64) Verdict {
	cc := e.Data.cols()
	var v Verdict
	amount, dur := row[cc.amount], row[cc.duration]
	if row[cc.installment] >= 4 && amount/dur > e.MaxMonthly {
		v.Flags |= FlagOverCommitted
	}
	if amount > e.MaxAmount {
		v.Flags |= FlagAmountLimit
		v.Veto = true
	}
	if dur > e.MaxDuration {
		v.Flags |= FlagDurationLimit
		v.Veto = true
	}
	if row[cc.credits] >= e.MaxCredits {
		v.Flags |= FlagManyCredits
	}
	chk := e.Data.Attrs[cc.checking].Values[int(row[cc.checking])]
	sav := e.Data.Attrs[cc.savings].Values[int(row[cc.savings])]
	if chk == "<0" && sav == "<100" && amount > e.NoBufferAmount {
		v.Flags |= FlagNoBuffer
	}
	return v
}

// Features returns the rule engine's embedding of a row: one 0/1 per flag,
// the veto, and the flag count scaled to [0,1].
func (e *Compliance) Features(row []float64) []float32 {
	v := e.Check(row)
	out := make([]float32, NumRuleFlags+2)
	for i := 0; i < NumRuleFlags; i++ {
		if v.Flags&(1<<i) != 0 {
			out[i] = 1
		}
	}
	if v.Veto {
		out[NumRuleFlags] = 1
	}
	out[NumRuleFlags+1] = float32(v.Count()) / NumRuleFlags
	return out
}

// Score is the rule engine's risk score of a row: the flag count plus a
// point for the riskiest credit history and checking status (no learning).
func (e *Compliance) Score(row []float64) float64 {
	cc := e.Data.cols()
	s := float64(e.Check(row).Count())
	if e.Data.Attrs[cc.checking].Values[int(row[cc.checking])] == "<0" {
		s++
	}
	switch e.Data.Attrs[cc.history].Values[int(row[cc.history])] {
	case "no credits/all paid", "all paid":
		s++
	}
	if row[cc.duration] > 24 {
		s++
	}
	return s
}

// FairnessFlip reports whether decide changes its decision for row when
// only the sex or only the age group is changed.
func (e *Compliance) FairnessFlip(row []float64, decide func(row []float64) bool) bool {
	d := decide(row)
	for k := 0; k < NumFlips; k++ {
		if decide(e.Data.Counterfactual(row, k)) != d {
			return true
		}
	}
	return false
}
