package planner

import (
	"slices"
	"strings"
	"testing"
)

// led parses "1:n1:n1,n2,n3" (group:leader:voters).
func led(spec ...string) []Led {
	var gs []Led
	for _, s := range spec {
		parts := strings.Split(s, ":")
		g := Led{Leader: parts[1], Voters: strings.Split(parts[2], ",")}
		for _, c := range parts[0] {
			g.ID = g.ID*10 + uint64(c-'0')
		}
		gs = append(gs, g)
	}
	return gs
}

func TestPlanLeaders(t *testing.T) {
	tests := []struct {
		name    string
		members []Member
		groups  []Led
		max     int
		want    []string
	}{
		{
			name:    "three groups led by one node spread over three",
			members: members("n1/-", "n2/-", "n3/-"),
			groups:  led("1:n1:n1,n2,n3", "2:n1:n1,n2,n3", "3:n1:n1,n2,n3"),
			max:     10,
			want:    []string{"group 1: leader n1 -> n2", "group 2: leader n1 -> n3"},
		},
		{
			name:    "within one of each other: nothing to do",
			members: members("n1/-", "n2/-", "n3/-"),
			groups:  led("1:n1:n1,n2,n3", "2:n1:n1,n2,n3", "3:n2:n1,n2,n3", "4:n3:n1,n2,n3"),
			max:     10,
		},
		{
			name:    "max bounds the plan",
			members: members("n1/-", "n2/-", "n3/-"),
			groups:  led("1:n1:n1,n2,n3", "2:n1:n1,n2,n3", "3:n1:n1,n2,n3"),
			max:     1,
			want:    []string{"group 1: leader n1 -> n2"},
		},
		{
			name:    "a draining node hands over every leadership",
			members: members("n1/-/drain", "n2/-", "n3/-"),
			groups:  led("1:n1:n1,n2,n3", "2:n2:n1,n2,n3"),
			max:     10,
			want:    []string{"group 1: leader n1 -> n3"},
		},
		{
			name:    "only to a voter of the group, and never to a dead node",
			members: members("n1/-", "n2/-", "n3/-/dead", "n4/-"),
			groups:  led("1:n1:n1,n3", "2:n1:n1,n2", "3:n1:n1,n2"),
			max:     10,
			want:    []string{"group 2: leader n1 -> n2"},
		},
		{
			name:    "unknown leaders are left alone",
			members: members("n1/-", "n2/-"),
			groups:  led("1::n1,n2", "2::n1,n2"),
			max:     10,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, tr := range PlanLeaders(tt.members, tt.groups, tt.max) {
				got = append(got, tr.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("plan\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}
