package catalog

import (
	"errors"
	"strings"
	"testing"
)

func TestClusterIDString(t *testing.T) {
	for _, tc := range []struct {
		id   ClusterID
		want string
	}{
		{testClusterID, "0102030405060708090a0b0c0d0e0f10"},
		{otherClusterID, "ffeeddccbbaa99887766554433221100"},
		{ClusterID{15: 1}, "00000000000000000000000000000001"},
		{ClusterID{}, ""},
	} {
		if got := tc.id.String(); got != tc.want {
			t.Errorf("% x: String %q, want %q", tc.id[:], got, tc.want)
		}
		if tc.id.IsZero() != (tc.want == "") {
			t.Errorf("% x: IsZero %v", tc.id[:], tc.id.IsZero())
		}
		if tc.want == "" {
			continue
		}
		if got, err := ParseClusterID(tc.want); err != nil || got != tc.id {
			t.Errorf("ParseClusterID(%q) = % x, %v; want % x", tc.want, got[:], err, tc.id[:])
		}
	}
	if got, err := ParseClusterID("FFEEDDCCBBAA99887766554433221100"); err != nil || got != otherClusterID {
		t.Errorf("uppercase: % x, %v", got[:], err)
	}
}

func TestParseClusterIDRefuses(t *testing.T) {
	tests := []struct {
		name string
		s    string
		says string // the error names the problem with this
	}{
		{"empty", "", "empty"},
		{"short", "0102030405060708090a0b0c0d0e0f1", "31 bytes"},
		{"long", "0102030405060708090a0b0c0d0e0f1011", "34 bytes"},
		{"very long", strings.Repeat("a", 1000), "1000 bytes"},
		{"not hex", "0102030405060708090a0b0c0d0e0fxy", "'x' at byte 30"},
		{"space", " 102030405060708090a0b0c0d0e0f10", "' ' at byte 0"},
		{"dashes", "01020304-0506-0708-090a-0b0c0d0e", "'-' at byte 8"},
		{"uuid form", "01020304-0506-0708-090a-0b0c0d0e0f10", "36 bytes"},
		{"trailing newline", "0102030405060708090a0b0c0d0e0f1\n", `'\n' at byte 31`},
		{"zero", strings.Repeat("0", 32), "zero id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := ParseClusterID(tc.s)
			if !errors.Is(err, ErrInvalidClusterID) || !id.IsZero() {
				t.Fatalf("ParseClusterID(%q) = % x, %v; want the zero id and ErrInvalidClusterID", tc.s, id[:], err)
			}
			if !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("error %q does not say %q", err, tc.says)
			}
			t.Log(err)
		})
	}
}

func TestNewClusterID(t *testing.T) {
	seen := map[ClusterID]bool{}
	for range 100 {
		id, err := NewClusterID()
		if err != nil {
			t.Fatal(err)
		}
		if id.IsZero() || seen[id] {
			t.Fatalf("id %v zero or drawn twice", id)
		}
		seen[id] = true
		if back, err := ParseClusterID(id.String()); err != nil || back != id {
			t.Fatalf("%v parses as %v, %v", id, back, err)
		}
	}
}

// FuzzParseClusterID: ParseClusterID never panics, and an id it accepts
// is not zero and prints as its text, lowercased.
func FuzzParseClusterID(f *testing.F) {
	f.Add(testClusterID.String())
	f.Add("FFEEDDCCBBAA99887766554433221100")
	f.Add(strings.Repeat("0", 32))
	f.Add("0102030405060708090a0b0c0d0e0fxy")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseClusterID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidClusterID) || !id.IsZero() {
				t.Fatalf("% x, %v", id[:], err)
			}
			return
		}
		if id.IsZero() || id.String() != strings.ToLower(s) {
			t.Fatalf("%q parsed as % x, which prints as %q", s, id[:], id)
		}
	})
}
