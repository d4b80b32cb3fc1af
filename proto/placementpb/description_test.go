package placementpb

import (
	"testing"
	"time"
)

func TestParseISODuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "PT1M", want: time.Minute},
		{in: "PT20S", want: 20 * time.Second},
		{in: "PT1H", want: time.Hour},
		{in: "P14D", want: 14 * 24 * time.Hour},
		{in: "P1DT2H3M4.5S", want: 26*time.Hour + 3*time.Minute + 4500*time.Millisecond},
		{in: "P10675199DT2H48M5.4775807S", want: time.Duration(1<<63 - 1)},
		{in: "PT0.25S", want: 250 * time.Millisecond},
		{in: "1M", bad: true},
		{in: "P", bad: true},
		{in: "PT", bad: true},
		{in: "P1H", bad: true}, // hours belong after T
		{in: "PT1D", bad: true},
		{in: "PTT1S", bad: true},
		{in: "PT1", bad: true},
	} {
		got, err := ParseISODuration(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: parsed as %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestQueueDescriptionProperties(t *testing.T) {
	d := QueueDescription{
		LockDuration: 30 * time.Second, MaxDeliveryCount: 3, DefaultMessageTimeToLive: time.Hour,
		DeadLetteringOnMessageExpiration: true, RequiresDuplicateDetection: true,
		DuplicateDetectionHistoryTimeWindow: time.Minute, RequiresSession: true, MaxSizeInMegabytes: 2048,
		MaxMessageSizeInKilobytes: 1024, PartitionCount: 4, ForwardTo: "a", ForwardDeadLetteredMessagesTo: "b",
	}
	want := &QueueProperties{
		LockDurationMs: 30_000, MaxDeliveryCount: 3, DefaultMessageTtlMs: 3_600_000,
		DeadLetteringOnMessageExpiration: true, RequiresDuplicateDetection: true,
		DuplicateDetectionWindowMs: 60_000, RequiresSession: true, MaxSizeInMegabytes: 2048,
		MaxMessageSizeInKilobytes: 1024, PartitionCount: 4, ForwardTo: "a", ForwardDeadLetteredMessagesTo: "b",
	}
	if got := d.Properties(); got.String() != want.String() {
		t.Fatalf("properties\n%v\nwant\n%v", got, want)
	}
}

func TestFormatISODurationRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{time.Minute, "PT1M"},
		{20 * time.Second, "PT20S"},
		{14 * 24 * time.Hour, "P14D"},
		{26*time.Hour + 3*time.Minute + 4500*time.Millisecond, "P1DT2H3M4.5S"},
		{250 * time.Millisecond, "PT0.25S"},
		{0, "PT0S"},
		{Forever, ForeverISO},
	} {
		got := FormatISODuration(tc.d)
		if got != tc.want {
			t.Errorf("FormatISODuration(%v) = %q, want %q", tc.d, got, tc.want)
		}
		back, err := ParseISODuration(got)
		if err != nil || back != tc.d {
			t.Errorf("ParseISODuration(%q) = %v, %v; want %v", got, back, err, tc.d)
		}
	}
}

func TestDescribeInvertsProperties(t *testing.T) {
	d := QueueDescription{
		LockDuration:                        30 * time.Second,
		MaxDeliveryCount:                    7,
		DefaultMessageTimeToLive:            time.Hour,
		DeadLetteringOnMessageExpiration:    true,
		RequiresDuplicateDetection:          true,
		DuplicateDetectionHistoryTimeWindow: 2 * time.Minute,
		RequiresSession:                     true,
		MaxSizeInMegabytes:                  2048,
		MaxMessageSizeInKilobytes:           1024,
		PartitionCount:                      4,
		EnablePartitioning:                  true,
		UserMetadata:                        "owner=payments",
	}
	if got := Describe(d.Properties()); got != d {
		t.Fatalf("Describe(Properties()) = %+v, want %+v", got, d)
	}
	// No TTL is described as Forever, and Forever is stored as none.
	none := Describe(&QueueProperties{})
	if none.DefaultMessageTimeToLive != Forever {
		t.Fatalf("TTL of 0 described as %v, want Forever", none.DefaultMessageTimeToLive)
	}
	if ms := none.Properties().DefaultMessageTtlMs; ms != 0 {
		t.Fatalf("Forever stored as %d ms, want 0 (none)", ms)
	}
}
