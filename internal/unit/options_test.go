package unit

import (
	"regexp"
	"slices"
	"testing"
)

func TestOptionTables(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	for _, section := range sections {
		table := optionTable(section)
		if len(table) == 0 {
			t.Errorf("optionTable(%q) is empty", section)
		}
		for i, name := range table {
			if i > 0 && table[i-1] >= name {
				t.Errorf("optionTable(%q): %q comes after %q; want the table sorted without duplicates", section, name, table[i-1])
			}
			if !valid.MatchString(name) {
				t.Errorf("optionTable(%q) holds %q, which is not an option name", section, name)
			}
		}
	}
	// A few options from each man page, and legacy spellings systemd accepts.
	known := map[string][]string{
		sectionUnit: {"Description", "Documentation", "After", "Requires", "Wants", "BindsTo", "BindTo", "ConditionPathExists",
			"AssertPathExists", "StartLimitIntervalSec", "StartLimitInterval", "StartLimitBurst", "OnFailure", "SuccessAction"},
		sectionService: {"Type", "ExecStart", "ExecStartPre", "ExecStartPost", "ExecStop", "ExecStopPost", "ExecReload",
			"Restart", "RestartSec", "TimeoutSec", "TimeoutStartSec", "TimeoutStopSec", "RemainAfterExit", "PIDFile",
			"User", "Group", "WorkingDirectory", "Environment", "EnvironmentFile", "LimitNOFILE", "ProtectSystem", "PrivateTmp",
			"StandardOutput", "SyslogIdentifier", "KillMode", "KillSignal", "SendSIGKILL", "CPUQuota", "CPUWeight", "CPUShares",
			"MemoryMax", "MemoryHigh", "MemoryLimit", "TasksMax", "IOWeight", "Slice", "Delegate", "StartLimitInterval", "StartLimitBurst"},
		sectionInstall: {"WantedBy", "RequiredBy", "Alias", "Also", "DefaultInstance"},
		sectionFleet:   {"MachineID", "MachineOf", "MachineMetadata", "Conflicts", "Global", "Replaces", "Role", "Placement"},
	}
	for section, names := range known {
		for _, name := range names {
			if !knownOption(section, name) {
				t.Errorf("knownOption(%q, %q) = false, want true", section, name)
			}
		}
	}
	if n := len(serviceOptions); n < 250 {
		t.Errorf("len(serviceOptions) = %d, want the complete table (at least 250)", n)
	}
	for old, current := range deprecatedFleetOptions {
		if !knownOption(sectionFleet, current) || knownOption(sectionFleet, old) {
			t.Errorf("deprecatedFleetOptions[%q] = %q, want a current option and a name outside the table", old, current)
		}
	}
	for name := range obsoleteOptions {
		if !knownOption(sectionUnit, name) && !knownOption(sectionService, name) {
			t.Errorf("obsoleteOptions holds %q, which no table has", name)
		}
	}
	for _, name := range []string{"Description", "ExecStart"} {
		if knownOption("Nope", name) {
			t.Errorf("knownOption(%q, %q) = true, want false", "Nope", name)
		}
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"abc", "abc", 0},
		{"abc", "abd", 1},
		{"abc", "ab", 1},
		{"ab", "abc", 1},
		{"abc", "acb", 1},
		{"execstrat", "execstart", 1},
		{"abc", "xyz", 3},
		{"a", "abcdef", 3}, // gives up: more than maxSuggestDistance
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestSuggestions(t *testing.T) {
	tests := []struct {
		section, name, want string
	}{
		{sectionService, "ExecStrat", "ExecStart"},
		{sectionService, "EXECSTART", "ExecStart"},
		{sectionService, "RestartSecs", "RestartSec"},
		{sectionService, "Enviroment", "Environment"},
		{sectionService, "Nothing", ""},
		{sectionUnit, "Descripton", "Description"},
		{sectionInstall, "WantBy", "WantedBy"},
		{sectionFleet, "Globl", "Global"},
		{sectionFleet, "Placment", "Placement"},
	}
	for _, tt := range tests {
		if got := suggestOption(tt.section, tt.name); got != tt.want {
			t.Errorf("suggestOption(%q, %q) = %q, want %q", tt.section, tt.name, got, tt.want)
		}
	}
	for in, want := range map[string]string{"X-Flet": "X-Fleet", "Fleet": "X-Fleet", "unit": "Unit", "Srvice": "Service", "Foo": ""} {
		if got := suggestSection(in); got != want {
			t.Errorf("suggestSection(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestHandledOptionsKnown checks that every option Parse acts on is in its
// section's table, so that no handler is unreachable.
func TestHandledOptionsKnown(t *testing.T) {
	handled := map[string][]string{
		sectionUnit: {"Description", "StartLimitIntervalSec", "StartLimitInterval", "StartLimitBurst"},
		sectionService: {"Type", "Restart", "KillMode", "KillSignal", "RemainAfterExit", "RestartSec", "TimeoutStartSec",
			"TimeoutStopSec", "TimeoutSec", "StartLimitInterval", "StartLimitBurst", "CPUQuota", "MemoryMax", "MemoryLimit",
			"User", "Group", "WorkingDirectory", "Environment", "EnvironmentFile", "ExecStartPre", "ExecStart",
			"ExecStartPost", "ExecStop", "ExecStopPost", "ExecReload", "ExecCondition"},
	}
	for section, names := range handled {
		for _, name := range names {
			if !slices.Contains(optionTable(section), name) {
				t.Errorf("optionTable(%q) lacks %q, which Parse handles", section, name)
			}
		}
	}
}
