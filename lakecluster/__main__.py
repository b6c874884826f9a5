from lakecluster.cli import entry

entry()
