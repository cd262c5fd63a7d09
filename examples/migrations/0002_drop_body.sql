-- storectl: changes nothing
ALTER TABLE ZITEM DROP COLUMN ZBODY;
