package machine

import (
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want string // "" for valid
	}{
		{"m1", ""},
		{"web-01.eu_west", ""},
		{strings.Repeat("a", 64), ""},
		{strings.Repeat("a", 65), "65 bytes; the limit is 64"},
		{"", "empty"},
		{"-m", "starting with a letter or digit"},
		{"m 1", "letters, digits"},
		{"m/1", "letters, digits"},
		{"é", "letters, digits"},
	} {
		err := ValidateName(tc.name)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("ValidateName(%q) = %v, want nil", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("ValidateName(%q) = %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestCheckMetadata(t *testing.T) {
	if err := CheckMetadataPair(strings.Repeat("k", 128), strings.Repeat("v", 512)); err != nil {
		t.Errorf("a pair at the limits: %v", err)
	}
	if err := CheckMetadataPair(strings.Repeat("k", 129), "v"); err == nil || !strings.Contains(err.Error(), "the limit is 128") {
		t.Errorf("a 129-byte key: %v, want the key limit named", err)
	}
	if err := CheckMetadataPair("k", strings.Repeat("v", 513)); err == nil || !strings.Contains(err.Error(), "513 bytes; the limit is 512") {
		t.Errorf("a 513-byte value: %v, want the value limit named", err)
	}
	if err := CheckMetadataCount(64); err != nil {
		t.Errorf("64 pairs: %v", err)
	}
	if err := CheckMetadataCount(65); err == nil || !strings.Contains(err.Error(), "the limit is 64") {
		t.Errorf("65 pairs: %v, want the limit named", err)
	}
}
