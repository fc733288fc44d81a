package faults

import "testing"

// TestLostPushesNamesReasons: the lost pushes column says which path lost
// them, in the pusher's reason order, and a bare count when none was.
func TestLostPushesNamesReasons(t *testing.T) {
	tests := []struct {
		name string
		row  Row
		want string
	}{
		{name: "none", row: Row{}, want: "0"},
		{name: "one reason", row: Row{LostPushes: 23, LostBy: map[string]float64{"timeout": 23}}, want: "23 (timeout 23)"},
		{
			name: "several",
			row:  Row{LostPushes: 23, LostBy: map[string]float64{"frontend_reconnected": 3, "timeout": 20}},
			want: "23 (timeout 20, frontend_reconnected 3)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lostPushes(tt.row); got != tt.want {
				t.Errorf("lostPushes = %q, want %q", got, tt.want)
			}
		})
	}
}
