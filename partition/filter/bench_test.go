package filter

import "testing"

// benchMessage is a typical topic message: a few system properties and a
// handful of application properties.
func benchMessage() *Message {
	return &Message{
		MessageID:     "4b1a7f3c-0d1e-4c55-9a36-3d8f0a1b2c3d",
		CorrelationID: "order-1234",
		Subject:       "OrderPlaced",
		ContentType:   "application/json",
		Size:          1024,
		Properties: map[string]any{
			"region":   "emea",
			"priority": int32(3),
			"amount":   149.95,
			"store":    "Store7",
			"express":  true,
		},
	}
}

// BenchmarkSQLFilter is a typical three-clause filter that matches.
func BenchmarkSQLFilter(b *testing.B) {
	f, err := CompileSQL("region = 'emea' AND priority >= 2 AND sys.Label LIKE 'Order%'", nil)
	if err != nil {
		b.Fatal(err)
	}
	m := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Match(m); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkSQLFilterInArithmetic(b *testing.B) {
	f, err := CompileSQL("store IN ('Store1', 'Store5', 'Store7') AND amount * 1.2 > 100 OR NOT EXISTS(region)", nil)
	if err != nil {
		b.Fatal(err)
	}
	m := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Match(m); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkCorrelationFilter(b *testing.B) {
	f, err := Correlation{CorrelationID: "order-1234", Subject: "OrderPlaced", Properties: map[string]any{"region": "emea"}}.Compile()
	if err != nil {
		b.Fatal(err)
	}
	m := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		if ok, err := f.Match(m); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkAction(b *testing.B) {
	a, err := CompileAction("SET sys.Label = 'Routed'; SET priority = priority + 1; REMOVE express", nil)
	if err != nil {
		b.Fatal(err)
	}
	m := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Apply(m, nil); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCompileSQL(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := CompileSQL("region = 'emea' AND priority >= 2 AND sys.Label LIKE 'Order%'", nil); err != nil {
			b.Fatal(err)
		}
	}
}
