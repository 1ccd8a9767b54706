package render
import ("os";"testing")
type tp struct{}
func (tp) Table(bool) Table { return Table{Header: []string{"ENV","SITE","VERDICT","NEXT STEP"}, Rows: [][]string{{"env-dev-01","cbs","OK",""},{"env-dev-08","cbs","SILENT","agent stopped on a live host: systemctl enable --now monky-deployd.timer (timer reported disabled; last ran 0.1.8)"}}, Lines: []string{"2 envs: 1 OK, 1 SILENT"}} }
func TestTry(t *testing.T){ Printer{Format: FormatTable}.Print(os.Stdout, tp{}) }
